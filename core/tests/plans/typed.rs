//! Typed records (`Store::typed`) over a small in-memory executor, in both layouts: values
//! round-trip through the codec, are stored as the codec's bytes, and a value that cannot be
//! encoded or decoded is an `Error::Codec` naming the record.

use std::collections::BTreeMap;
use std::future::{ready, Future};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use botmesh_redis_core::codec::{CodecError, Decode, Encode, Json};
use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::{Deployment, Error, Executor, Layout, Request, Value};
use botmesh_redis_core::{Store, StoreOptions};

/// Keeps values by key, as the store's writes leave them: `SET key value ...`, and the
/// indexed-write scripts, whose first key gets the second argument (the first is the id or
/// index member). Index keys are not kept: these tests read records by id only.
#[derive(Clone, Default)]
struct Memory {
    values: Arc<Mutex<BTreeMap<Bytes, Bytes>>>,
    sent: Arc<Mutex<usize>>,
}

impl Memory {
    fn answer(&self, request: &Request) -> Reply {
        *self.sent.lock().unwrap() += 1;
        let args = request.wire_args(false);
        let mut values = self.values.lock().unwrap();
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        match name.as_str() {
            "SET" => {
                values.insert(args[1].clone(), args[2].clone());
                Ok(Value::Status(Bytes::from_static(b"OK")))
            }
            "GET" => Ok(values
                .get(&args[1])
                .cloned()
                .map_or(Value::Nil, Value::Bulk)),
            "EVALSHA" => {
                let keys: usize = std::str::from_utf8(&args[2]).unwrap().parse().unwrap();
                let first_key = args[3].clone();
                let script_args = &args[3 + keys..];
                values.insert(first_key, script_args[1].clone());
                Ok(Value::Int(1))
            }
            other => panic!("the memory executor does not know {other}"),
        }
    }

    fn sent(&self) -> usize {
        *self.sent.lock().unwrap()
    }
}

impl Executor for Memory {
    fn run<P: Plan>(&self, mut plan: P) -> impl Future<Output = Result<P::Output, Error>> + Send {
        let mut step = plan.start();
        let result = loop {
            step = match step {
                Step::Send(batch) => plan.resume(batch.iter().map(|r| self.answer(r)).collect()),
                Step::Wait(_) => plan.resume(Vec::new()),
                Step::Done(result) => break result,
            };
        };
        ready(result)
    }

    fn deployment(&self) -> Deployment {
        Deployment::Single
    }

    fn detach<P: Plan>(&self, plan: P) {
        drop(block_on(self.run(plan)));
    }

    fn shutdown(&self, _grace: Duration) -> impl Future<Output = ()> + Send {
        ready(())
    }
}

/// Runs a future that never waits: the memory executor answers at once.
fn block_on<F: Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the memory executor never waits"),
    }
}

fn stores() -> Vec<(Layout, Memory, Store<Memory>)> {
    [Layout::Legacy, Layout::Cluster]
        .into_iter()
        .map(|layout| {
            let memory = Memory::default();
            let store =
                Store::new(memory.clone(), StoreOptions::new("bot").layout(layout)).unwrap();
            (layout, memory, store)
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Chat {
    title: String,
    members: Vec<String>,
    muted: bool,
}

fn chat() -> Chat {
    Chat {
        title: "Família 😀".into(),
        members: vec!["ana".into(), "bob".into()],
        muted: false,
    }
}

#[test]
fn every_record_kind_round_trips() {
    for (layout, _, store) in stores() {
        let typed = store.typed(Json);
        let value = chat();
        block_on(async {
            typed.upsert_chat("a:b{c}", &value).await.unwrap();
            assert_eq!(
                typed.get_chat("a:b{c}").await,
                Ok(Some(value.clone())),
                "{layout}"
            );

            typed.upsert_contact("ana", &value).await.unwrap();
            assert_eq!(typed.get_contact("ana").await, Ok(Some(value.clone())));

            let ttl = Some(Duration::from_secs(60));
            typed.set_checkpoint("sync", &42u64, ttl).await.unwrap();
            assert_eq!(typed.get_checkpoint::<u64>("sync").await, Ok(Some(42)));

            typed
                .set_user_data("u1", "prefs", "chat", &value, None)
                .await
                .unwrap();
            assert_eq!(
                typed.get_user_data("u1", "prefs", "chat").await,
                Ok(Some(value.clone()))
            );

            let state = vec![("step".to_owned(), 2u32)];
            typed.set_conversation("c1", &state, ttl).await.unwrap();
            assert_eq!(typed.get_conversation("c1").await, Ok(Some(state)));

            // Nothing stored: nothing to decode.
            assert_eq!(typed.get_chat::<Chat>("nope").await, Ok(None), "{layout}");
            assert_eq!(
                typed.get_user_data::<Chat>("u1", "prefs", "x").await,
                Ok(None)
            );
        });
    }
}

#[test]
fn records_are_stored_as_the_codec_bytes() {
    for (_, _, store) in stores() {
        block_on(async {
            store.typed(Json).upsert_chat("c1", &chat()).await.unwrap();
            let raw = store.get_chat("c1").await.unwrap().unwrap();
            assert_eq!(raw, Bytes::from(serde_json::to_vec(&chat()).unwrap()));
        });
    }
}

#[test]
fn a_record_that_does_not_decode_names_itself() {
    for (layout, _, store) in stores() {
        block_on(async {
            store
                .upsert_contact("ana", "not json".into())
                .await
                .unwrap();
            let err = store
                .typed(Json)
                .get_contact::<Chat>("ana")
                .await
                .unwrap_err();
            match &err {
                Error::Codec { what, detail } => {
                    assert_eq!(what, "decoding contact \"ana\"", "{layout}");
                    assert!(!detail.is_empty());
                }
                other => panic!("not a codec error: {other:?}"),
            }
            assert!(!err.outcome_unknown());
            assert!(
                err.to_string().starts_with("decoding contact \"ana\": "),
                "{err}"
            );

            // The right bytes of the wrong shape fail the same way, and the record is kept.
            store
                .set_user_data("u1", "ns", "k", "[1,2]".into(), None)
                .await
                .unwrap();
            let err = store
                .typed(Json)
                .get_user_data::<Chat>("u1", "ns", "k")
                .await
                .unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("decoding user data \"k\" in namespace \"ns\" of user \"u1\": "),
                "{err}"
            );
            assert_eq!(
                store.get_user_data("u1", "ns", "k").await,
                Ok(Some(Bytes::from("[1,2]")))
            );
        });
    }
}

#[test]
fn a_value_that_does_not_encode_is_not_sent() {
    // JSON object keys must be strings.
    let value: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
    for (_, memory, store) in stores() {
        let err = block_on(store.typed(Json).upsert_chat("c1", &value)).unwrap_err();
        match &err {
            Error::Codec { what, .. } => assert_eq!(what, "encoding chat \"c1\""),
            other => panic!("not a codec error: {other:?}"),
        }
        assert_eq!(memory.sent(), 0);
    }
}

/// A view of a chat record that can only be read: no `Serialize`. Reading it through `Json`
/// compiles and works (reads need only `Deserialize`); writing it would not compile.
#[derive(Debug, PartialEq, Deserialize)]
struct ChatTitle {
    title: String,
}

/// A value that can only be written: no `Deserialize`, and unsized behind the reference.
#[derive(Serialize)]
struct Announcement<'a> {
    title: &'a str,
}

#[test]
fn reads_need_only_deserialize_and_writes_only_serialize() {
    for (layout, _, store) in stores() {
        let typed = store.typed(Json);
        block_on(async {
            typed
                .upsert_chat("c1", &Announcement { title: "Ana" })
                .await
                .unwrap();
            assert_eq!(
                typed.get_chat::<ChatTitle>("c1").await,
                Ok(Some(ChatTitle {
                    title: "Ana".into()
                })),
                "{layout}"
            );
            // A whole chat is readable as its title only: unknown fields are ignored.
            typed.upsert_chat("c2", &chat()).await.unwrap();
            let title = typed.get_chat::<ChatTitle>("c2").await.unwrap().unwrap();
            assert_eq!(title.title, chat().title);
        });
    }
}

/// A codec of the user's own, without serde.
struct Decimal;

impl Encode<u64> for Decimal {
    fn encode(&self, value: &u64) -> Result<Bytes, CodecError> {
        Ok(Bytes::from(value.to_string()))
    }
}

impl Decode<u64> for Decimal {
    fn decode(&self, bytes: &[u8]) -> Result<u64, CodecError> {
        let text = std::str::from_utf8(bytes).map_err(CodecError::new)?;
        text.parse().map_err(CodecError::new)
    }
}

#[test]
fn a_codec_of_ones_own() {
    for (_, _, store) in stores() {
        let typed = store.typed(Decimal);
        block_on(async {
            typed.set_checkpoint("offset", &1_234, None).await.unwrap();
            assert_eq!(
                store.get_checkpoint("offset").await,
                Ok(Some(Bytes::from("1234")))
            );
            assert_eq!(typed.get_checkpoint("offset").await, Ok(Some(1_234)));
            store
                .set_checkpoint("offset", "x".into(), None)
                .await
                .unwrap();
            let err = typed.get_checkpoint("offset").await.unwrap_err();
            assert_eq!(
                err.to_string(),
                "decoding checkpoint \"offset\": invalid digit found in string"
            );
        });
    }
}

#[test]
fn typed_futures_are_send() {
    fn send<T: Send>(_: T) {}
    let (_, _, store) = stores().pop().unwrap();
    let typed = store.typed(Json);
    send(typed.get_chat::<Chat>("c1"));
    send(typed.upsert_chat("c1", &chat()));
    send(typed.set_user_data("u", "n", "k", &chat(), None));
}
