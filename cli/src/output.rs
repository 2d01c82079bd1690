//! What every command prints: aligned tables and label/value lines on stdout, and a progress
//! bar on stderr that only a person at a terminal sees.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A table of plain text columns: the first column left-aligned, a column of numbers
/// right-aligned, two spaces between columns, every line indented by two.
#[derive(Debug, Default)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub(crate) fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty.
    pub(crate) fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows
            .push(cells.into_iter().map(|c| c.to_string()).collect());
    }

    /// Whether no row was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row after the header, each ending in a newline.
    pub(crate) fn render(&self) -> String {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let cell = |row: &[String], c: usize| row.get(c).cloned().unwrap_or_default();
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .chain([&self.header])
                    .map(|r| cell(r, c).chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let numeric: Vec<bool> = (0..columns)
            .map(|c| {
                c > 0
                    && self.rows.iter().all(|r| {
                        let v = cell(r, c);
                        !v.is_empty()
                            && v.chars()
                                .all(|ch| ch.is_ascii_digit() || ch == '.' || ch == '%')
                    })
            })
            .collect();
        let mut out = String::new();
        for row in [&self.header].into_iter().chain(&self.rows) {
            let mut line = String::from(" ");
            for (c, width) in widths.iter().enumerate() {
                let v = cell(row, c);
                if numeric[c] {
                    let _ = write!(line, " {v:>width$}");
                } else {
                    let _ = write!(line, " {v:<width$}");
                }
                line.push(' ');
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Label/value lines with the values aligned, such as `marker   cluster:v1`.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    lines: Vec<(String, String)>,
}

impl Fields {
    /// No line yet.
    pub(crate) fn new() -> Self {
        Fields::default()
    }

    /// Adds a line.
    pub(crate) fn add(&mut self, label: impl Into<String>, value: impl ToString) {
        self.lines.push((label.into(), value.to_string()));
    }

    /// The lines as text.
    pub(crate) fn render(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        self.lines
            .iter()
            .map(|(label, value)| format!("{label:<width$}  {value}").trim_end().to_owned() + "\n")
            .collect()
    }
}

/// `1.234 s`: the elapsed time of a run.
pub(crate) fn seconds(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

/// A progress bar on stderr, hidden when stderr is no terminal (a script, a pipe, a test) or
/// with `--quiet`: its redraws would only litter a log. It starts as a spinner counting keys;
/// [`set_total`] makes it a bar.
pub(crate) fn progress(quiet: bool, message: &str) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(message.to_owned());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}: {pos} keys ({elapsed})") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Turns a spinner into a bar of `total` `unit` (such as `keys scanned`, out of the `DBSIZE`
/// of the nodes scanned).
pub(crate) fn set_total(bar: &ProgressBar, total: u64, unit: &str) {
    if bar.is_hidden() || bar.length() == Some(total) {
        return;
    }
    bar.set_length(total);
    let template = format!(
        "{{spinner}} {{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{elapsed}}, eta {{eta}})"
    );
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_names_left_and_numbers_right() {
        let mut t = Table::new(["namespace", "legacy", "where"]);
        t.row(["messages", "2", "a"]);
        t.row(["user-data", "1000", "bb"]);
        assert_eq!(
            t.render(),
            "  namespace  legacy  where\n  messages        2  a\n  user-data    1000  bb\n"
        );
    }

    #[test]
    fn fields_align_values() {
        let mut f = Fields::new();
        f.add("marker", "none");
        f.add("keys scanned", 12);
        f.add("empty", "");
        assert_eq!(f.render(), "marker        none\nkeys scanned  12\nempty\n");
    }
}
