//! One `botmesh_redis.operation` span per call of the API, on both drivers, recorded by a
//! subscriber of the test's own (a `tracing-subscriber` layer that keeps every closed span):
//! a store operation, a coordination operation, a raw call and a failed call each have their
//! span, a child of the caller's span, with the operation, the slot, the attempts, the node
//! that answered and the outcome; on a cluster the slot and node are the key's.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use botmesh_redis_core::{
    Access, ClientOptions, Error, Executor, Key, Request, Store, StoreOptions,
};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, shared_cluster, shared_single, unique_prefix};
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::span::{Attributes, Id, Record};
use tracing::{Instrument, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span as it was when it closed.
#[derive(Clone, Debug)]
struct Closed {
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<&'static str, String>,
}

impl Closed {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// A span's fields, as text.
#[derive(Default)]
struct Fields(BTreeMap<&'static str, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

/// Keeps every closed span, with its fields as recorded when created and later.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Closed>>>);

impl Spans {
    /// The closed spans named `botmesh_redis.operation`.
    fn operations(&self) -> Vec<Closed> {
        let closed = self.0.lock().unwrap();
        closed
            .iter()
            .filter(|s| s.name == botmesh_redis_tokio::OPERATION_SPAN)
            .cloned()
            .collect()
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(fields) = extensions.get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let fields = span.extensions_mut().remove::<Fields>().unwrap_or_default();
        self.0.lock().unwrap().push(Closed {
            name: span.name(),
            parent: span.parent().map(|p| p.name()),
            fields: fields.0,
        });
    }
}

/// Runs `body` with a subscriber of its own; the spans it closed.
async fn recording(body: impl std::future::Future<Output = ()>) -> Vec<Closed> {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    // The bot's span is made under the test's subscriber too, as the call's parent.
    let bot = async { body.instrument(tracing::info_span!("bot_update")).await };
    bot.with_subscriber(subscriber).await;
    spans.operations()
}

fn assert_span(span: &Closed, expected: &[(&str, &str)]) {
    assert_eq!(span.parent, Some("bot_update"), "{span:?}");
    for (name, value) in expected {
        assert_eq!(span.field(name), Some(*value), "field {name} of {span:?}");
    }
}

async fn each_call_has_a_span_with_its_outcome_on_a_single_node<R: Runtime>() {
    let node = shared_single();
    let client = Client::<R>::connect(ClientOptions::url(node.url()))
        .await
        .unwrap();
    let store = Store::open(client.clone(), StoreOptions::new(unique_prefix("spans")))
        .await
        .unwrap();
    let key = Key::new(format!("{}:k", unique_prefix("spans-call")));
    let spans = recording(async {
        assert!(store
            .save_message("chat", "m1", 1_700_000_000_000, "hi".into())
            .await
            .unwrap());
        let coordinator = store.coordinator("replica-1").unwrap();
        let fence = coordinator
            .lock("job", "owner-1", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(fence.is_some());
        let get = Request::cmd(Access::Read, "GET").key(&key).build().unwrap();
        assert_eq!(client.call(get).await, Ok(botmesh_redis_core::Value::Nil));
        let unknown = Request::cmd(Access::Read, "NOSUCHCOMMAND").build().unwrap();
        assert!(matches!(client.call(unknown).await, Err(Error::Server(_))));
    })
    .await;

    let addr = node.addr().to_string();
    let operations: Vec<&str> = spans.iter().filter_map(|s| s.field("operation")).collect();
    assert_eq!(operations, ["save_message", "lock_acquire", "call", "call"]);
    for span in &spans[..2] {
        assert_span(span, &[("node", &addr), ("outcome", "ok")]);
        // A script's first call on a node may meet NOSCRIPT and be sent again with its
        // source: two attempts. (The legacy layout's scripts span slots: no slot field.)
        let attempts = span.field("attempts");
        assert!(matches!(attempts, Some("1" | "2")), "{span:?}");
    }
    let slot = key.slot().to_string();
    assert_span(
        &spans[2],
        &[
            ("slot", &slot),
            ("attempts", "1"),
            ("node", &addr),
            ("outcome", "ok"),
        ],
    );
    // A keyless call has no slot; the server's refusal is its outcome.
    assert_span(
        &spans[3],
        &[("attempts", "1"), ("node", &addr), ("outcome", "server")],
    );
    assert_eq!(spans[3].field("slot"), None);
    client.close().await;
}

async fn a_cluster_call_span_names_its_slot_and_master<R: Runtime>() {
    let cluster = shared_cluster();
    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let keys: Vec<Key> = (0..4)
        .map(|i| Key::new(format!("{}:{i}", unique_prefix("spans-cluster"))))
        .collect();
    let spans = recording(async {
        for key in &keys {
            let set = Request::cmd(Access::Write, "SET")
                .key(key)
                .arg("v")
                .build()
                .unwrap();
            client.call(set).await.unwrap();
        }
    })
    .await;

    assert_eq!(spans.len(), keys.len(), "{spans:#?}");
    for (span, key) in spans.iter().zip(&keys) {
        let master = cluster.master_for_slot(key.slot()).unwrap().to_string();
        let slot = key.slot().to_string();
        assert_span(
            span,
            &[
                ("operation", "call"),
                ("slot", &slot),
                ("attempts", "1"),
                ("node", &master),
                ("outcome", "ok"),
            ],
        );
    }
    client.close().await;
}

both_drivers!(
    each_call_has_a_span_with_its_outcome_on_a_single_node,
    a_cluster_call_span_names_its_slot_and_master
);
