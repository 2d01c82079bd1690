//! `Batch`, the requests of one `Step::Send`: built from a request, a vector or an iterator,
//! it keeps their order whichever way it is read back.

use botmesh_redis_core::driver::plan::single;
use botmesh_redis_core::driver::{Batch, Plan, Step};
use botmesh_redis_core::{Access, Key, Request, Value};

fn get(key: &str) -> Request {
    Request::cmd(Access::Read, "GET")
        .key(Key::new(key.to_owned()))
        .build()
        .expect("one key")
}

fn names(batch: &Batch) -> Vec<String> {
    batch
        .iter()
        .flat_map(|r| {
            r.keys()
                .iter()
                .map(|k| String::from_utf8_lossy(k.as_bytes()).into_owned())
        })
        .collect()
}

#[test]
fn a_batch_keeps_its_order_however_it_is_built_and_read() {
    let one: Batch = get("a").into();
    assert_eq!(names(&one), ["a"]);

    let from_vec: Batch = vec![get("a"), get("b"), get("c")].into();
    assert_eq!(names(&from_vec), ["a", "b", "c"]);

    let collected: Batch = ["a", "b", "c"].into_iter().map(get).collect();
    assert_eq!(names(&collected), ["a", "b", "c"]);

    let mut grown = Batch::new();
    assert!(grown.is_empty());
    grown.push(get("a"));
    grown.extend([get("b"), get("c")]);
    assert_eq!(names(&grown), ["a", "b", "c"]);

    let backwards: Vec<_> = grown
        .clone()
        .into_iter()
        .rev()
        .map(|r| r.keys()[0].clone())
        .collect();
    assert_eq!(backwards, [Key::new("c"), Key::new("b"), Key::new("a")]);
    let as_vec = grown.into_vec();
    assert_eq!(as_vec.len(), 3);
    assert_eq!(as_vec[2].keys(), [Key::new("c")]);
}

#[test]
fn a_batch_prints_as_the_list_of_its_requests() {
    let batch: Batch = vec![get("a"), get("b")].into();
    assert_eq!(
        format!("{batch:?}"),
        format!("{:?}", vec![get("a"), get("b")])
    );
}

#[test]
fn a_one_request_plan_sends_a_batch_of_one() {
    let mut plan = single("get", get("k"), Ok::<Value, _>);
    let Step::Send(batch) = plan.start() else {
        panic!("a one-request plan starts by sending");
    };
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].keys(), [Key::new("k")]);
    let Step::Done(Ok(value)) = plan.resume_one(Ok(Value::Int(7))) else {
        panic!("a one-request plan is done with its reply");
    };
    assert_eq!(value, Value::Int(7));
}
