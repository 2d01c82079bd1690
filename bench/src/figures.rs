//! The figures file: one CSV row per printed figure line of `bench` (a client's closed-loop
//! run, an open-loop level, a ceiling), so that `charts` draws what the lines say.
//!
//! The first line is [`HEADER`]; an absent figure is an empty field. No field holds a comma
//! (names are client, workload and deployment names), so the file needs no quoting.

use std::fmt::Write as _;
use std::path::Path;

/// The column names, in the order of a row's fields.
pub const HEADER: &str = "kind,workload,deployment,runtime,client,callers,payload,\
offered_per_s,ops_per_s,p50_us,p99_us,p999_us,cpu_s_per_100k";

/// What a row measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A closed-loop run: `callers` tasks, each waiting for its reply before the next call.
    Closed,
    /// An open-loop level: calls started on a schedule at `offered_per_s`.
    Open,
    /// The servers' ceiling, measured by `redis-benchmark`.
    Ceiling,
}

impl Kind {
    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Closed => "closed",
            Kind::Open => "open",
            Kind::Ceiling => "ceiling",
        }
    }

    fn parse(name: &str) -> Result<Kind, String> {
        match name {
            "closed" => Ok(Kind::Closed),
            "open" => Ok(Kind::Open),
            "ceiling" => Ok(Kind::Ceiling),
            other => Err(format!("unknown kind {other:?}")),
        }
    }
}

/// One figure line of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Closed loop, open loop or ceiling.
    pub kind: Kind,
    /// `W1`, `W2`, `W3`, `S1`...
    pub workload: String,
    /// `cluster`, `standalone` or `standalone-unix`.
    pub deployment: String,
    /// `multi`, `current` or `async-std`.
    pub runtime: String,
    /// The client's name in the lines; `redis-benchmark` for a ceiling.
    pub client: String,
    /// Concurrent callers of a closed-loop run; the tool's connections for a ceiling; 0 for an
    /// open-loop level (each call is its own task).
    pub callers: usize,
    /// Bytes of W1's message payload or W2's values; none for W3 and the store's workloads.
    pub payload: Option<usize>,
    /// The arrival rate offered (open loop only).
    pub offered_per_s: Option<f64>,
    /// Operations per second achieved.
    pub ops_per_s: f64,
    /// Latency percentiles in microseconds (none for a ceiling).
    pub p50_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// 99.9th percentile.
    pub p999_us: Option<f64>,
    /// The bench process's CPU seconds per 100,000 operations (none for a ceiling).
    pub cpu_s_per_100k: Option<f64>,
}

impl Row {
    /// The row as a line of the file, without its newline.
    pub fn to_line(&self) -> String {
        let mut line = format!(
            "{},{},{},{},{},{},",
            self.kind.name(),
            self.workload,
            self.deployment,
            self.runtime,
            self.client,
            self.callers
        );
        if let Some(payload) = self.payload {
            let _ = write!(line, "{payload}");
        }
        for figure in [
            self.offered_per_s,
            Some(self.ops_per_s),
            self.p50_us,
            self.p99_us,
            self.p999_us,
            self.cpu_s_per_100k,
        ] {
            line.push(',');
            if let Some(figure) = figure {
                let _ = write!(line, "{figure:.3}");
            }
        }
        line
    }

    /// The row a line of the file holds.
    pub fn parse(line: &str) -> Result<Row, String> {
        let fields: Vec<&str> = line.split(',').collect();
        let [kind, workload, deployment, runtime, client, callers, payload, offered, ops, p50, p99, p999, cpu] =
            fields[..]
        else {
            return Err(format!("{} fields, not 13: {line:?}", fields.len()));
        };
        let number = |field: &str| -> Result<Option<f64>, String> {
            match field {
                "" => Ok(None),
                text => text.parse().map(Some).map_err(|e| format!("{text:?}: {e}")),
            }
        };
        Ok(Row {
            kind: Kind::parse(kind)?,
            workload: workload.to_owned(),
            deployment: deployment.to_owned(),
            runtime: runtime.to_owned(),
            client: client.to_owned(),
            callers: callers.parse().map_err(|e| format!("callers: {e}"))?,
            payload: match payload {
                "" => None,
                text => Some(text.parse().map_err(|e| format!("payload: {e}"))?),
            },
            offered_per_s: number(offered)?,
            ops_per_s: number(ops)?.ok_or("a row without ops_per_s")?,
            p50_us: number(p50)?,
            p99_us: number(p99)?,
            p999_us: number(p999)?,
            cpu_s_per_100k: number(cpu)?,
        })
    }
}

/// The rows of a figures file.
pub fn read(path: &Path) -> Result<Vec<Row>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    match lines.next() {
        Some(HEADER) => {}
        other => {
            return Err(format!(
                "{}: not a figures file ({other:?})",
                path.display()
            ))
        }
    }
    lines
        .filter(|line| !line.is_empty())
        .map(|line| Row::parse(line).map_err(|e| format!("{}: {e}", path.display())))
        .collect()
}

/// A figures file being written: the header at creation, then each row as it comes, flushed,
/// so that a run stopped halfway keeps the figures it printed.
pub struct Writer {
    file: std::io::BufWriter<std::fs::File>,
}

impl Writer {
    /// Creates (or empties) the file at `path` and writes the header.
    pub fn create(path: &Path) -> Result<Writer, String> {
        let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut writer = Writer {
            file: std::io::BufWriter::new(file),
        };
        writer.line(HEADER)?;
        Ok(writer)
    }

    /// Appends `row`.
    pub fn write(&mut self, row: &Row) -> Result<(), String> {
        self.line(&row.to_line())
    }

    fn line(&mut self, line: &str) -> Result<(), String> {
        use std::io::Write as _;
        writeln!(self.file, "{line}")
            .and_then(|()| self.file.flush())
            .map_err(|e| format!("writing the figures: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_back_as_written() {
        let row = Row {
            kind: Kind::Open,
            workload: "W2".into(),
            deployment: "cluster".into(),
            runtime: "current".into(),
            client: "fred-pool".into(),
            callers: 0,
            payload: Some(100),
            offered_per_s: Some(1250.5),
            ops_per_s: 1249.0,
            p50_us: Some(101.25),
            p99_us: None,
            p999_us: Some(900.0),
            cpu_s_per_100k: Some(0.2),
        };
        assert_eq!(Row::parse(&row.to_line()), Ok(row));
    }

    #[test]
    fn the_header_names_every_field() {
        assert_eq!(HEADER.split(',').count(), 13);
    }
}
