//! The plan of one batch: the requests go out together and every reply comes back, errors
//! included. The migration speaks through it, and tests build their scenarios from it.

use crate::plan::{misuse, Plan, Reply, Step};
use crate::request::{NodeTarget, Request};
use crate::scan::masters_request;

/// A plan that sends one batch and yields every reply, in order, errors included.
///
/// An empty batch is done at once, with no replies: nothing goes to a server.
///
/// A request for a master whose endpoint the cluster leaves unknown (`:port`, see
/// [`NodeTarget::Port`]) is resolved by the session against the node that gave the plan its
/// previous reply. A batch of its own has none, so one with such a request is led by
/// `CLUSTER SLOTS`: its answer names the host, as it does for the store's own scan.
// Public for `testing::Batch`; without that feature only the migration uses it.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
#[derive(Debug)]
pub struct Batch {
    requests: Option<Vec<Request>>,
    led: bool,
}

impl Batch {
    /// The plan of one batch.
    #[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
    pub fn new(requests: Vec<Request>) -> Self {
        Batch {
            requests: Some(requests),
            led: false,
        }
    }

    fn send(&mut self) -> Step<Vec<Reply>> {
        match self.requests.take() {
            Some(batch) => Step::Send(batch.into()),
            None => Step::Done(Err(misuse("Batch::start called twice"))),
        }
    }
}

fn needs_host(request: &Request) -> bool {
    matches!(request.node(), Some(NodeTarget::Port(_)))
}

impl Plan for Batch {
    type Output = Vec<Reply>;

    fn operation(&self) -> &'static str {
        "batch"
    }

    fn may_wait(&self) -> bool {
        self.requests
            .as_ref()
            .is_some_and(|batch| batch.iter().any(Request::blocks))
    }

    fn first_slot(&self) -> Option<u16> {
        self.requests.as_ref()?.first()?.slot()
    }

    fn start(&mut self) -> Step<Vec<Reply>> {
        match &self.requests {
            Some(batch) if batch.is_empty() => {
                self.requests = None;
                Step::Done(Ok(Vec::new()))
            }
            Some(batch) if batch.iter().any(needs_host) => {
                self.led = true;
                match masters_request() {
                    Ok(lead) => Step::Send(lead.into()),
                    Err(e) => Step::Done(Err(e)),
                }
            }
            _ => self.send(),
        }
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Vec<Reply>> {
        if std::mem::take(&mut self.led) {
            // The lead's answer only names the host; an error there surfaces with the batch.
            return self.send();
        }
        Step::Done(Ok(replies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Access;
    use crate::value::Value;

    fn get(key: &str) -> Request {
        Request::cmd(Access::Read, "GET")
            .key(crate::keys::Key::new(key.to_owned()))
            .build()
            .unwrap()
    }

    #[test]
    fn an_empty_batch_is_done_without_a_send() {
        let mut plan = Batch::new(Vec::new());
        assert!(matches!(plan.start(), Step::Done(Ok(replies)) if replies.is_empty()));
        assert!(matches!(plan.start(), Step::Done(Err(_))));
    }

    #[test]
    fn a_plan_names_its_first_requests_slot_before_it_starts() {
        let (a, b) = (get("a"), get("b"));
        let slot = crate::keys::Key::new("a").slot();
        assert_eq!(Batch::new(vec![a.clone(), b]).first_slot(), Some(slot));
        assert_eq!(Batch::new(Vec::new()).first_slot(), None);
        assert_eq!(crate::plan::single("get", a, Ok).first_slot(), Some(slot));
        let keyless = Request::cmd(Access::Read, "DBSIZE").build().unwrap();
        assert_eq!(crate::plan::single("size", keyless, Ok).first_slot(), None);
    }

    #[test]
    fn a_batch_yields_its_replies_errors_included() {
        let mut plan = Batch::new(vec![get("a"), get("b")]);
        let Step::Send(sent) = plan.start() else {
            panic!("a batch starts by sending");
        };
        assert_eq!(sent.len(), 2);
        let replies = vec![Ok(Value::Nil), Err(misuse("lost"))];
        let Step::Done(Ok(out)) = plan.resume(replies) else {
            panic!("a batch is done after its replies");
        };
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], Ok(Value::Nil));
        assert!(out[1].is_err());
    }

    #[test]
    fn a_request_for_an_unknown_host_is_led_by_cluster_slots() {
        let port = Request::cmd(Access::Read, "DBSIZE")
            .to_node(":7001")
            .build()
            .unwrap();
        let mut plan = Batch::new(vec![port]);
        let Step::Send(lead) = plan.start() else {
            panic!("the lead goes first");
        };
        assert_eq!(lead[0].to_string(), masters_request().unwrap().to_string());
        let Step::Send(batch) = plan.resume(vec![Ok(Value::Array(Vec::new()))]) else {
            panic!("the batch follows its lead");
        };
        assert!(needs_host(&batch[0]));
    }
}
