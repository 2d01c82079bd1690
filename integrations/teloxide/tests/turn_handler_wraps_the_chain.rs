//! `ChatTurns::handler` holds the update's chat turn while the rest of the chain runs: another
//! replica cannot take it meanwhile, and can right after, whether the endpoint succeeded or
//! failed; an update without a chat passes through without a turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use botmesh_redis_teloxide::{ChatTurns, TurnError};
use botmesh_redis_tokio::TurnOptions;
use support::{prefix, quick_turns, Setup};
use teloxide::dispatching::dialogue::serializer::Json;
use teloxide::dptree;
use teloxide::types::{ChatId, Update};

type HandlerError = Box<dyn std::error::Error + Send + Sync>;

const CHAT: i64 = 77;

fn message_update(chat: i64) -> Update {
    let json = format!(
        r#"{{"update_id": 1, "message": {{"message_id": 1, "date": 1700000000,
            "chat": {{"id": {chat}, "type": "private", "first_name": "u"}},
            "from": {{"id": {chat}, "is_bot": false, "first_name": "u"}}, "text": "hi"}}}}"#
    );
    serde_json::from_str(&json).unwrap()
}

fn inline_query_update() -> Update {
    let json = r#"{"update_id": 2, "inline_query": {"id": "q1",
        "from": {"id": 5, "is_bot": false, "first_name": "u"}, "query": "", "offset": ""}}"#;
    serde_json::from_str(json).unwrap()
}

/// Turns that give up waiting after 300 ms: "not granted" within a test's patience.
fn impatient() -> TurnOptions {
    TurnOptions {
        wait_timeout: Duration::from_millis(300),
        ..quick_turns()
    }
}

async fn two_replicas(setup: Setup, name: &str) -> (ChatTurns, ChatTurns) {
    let prefix = prefix(name);
    let a = setup.storage(&prefix, Json).await;
    let b = setup.storage(&prefix, Json).await;
    let heartbeat = Duration::from_secs(5);
    let turns_a = ChatTurns::start_with(a.store(), format!("{prefix}-a"), quick_turns(), heartbeat)
        .await
        .unwrap();
    let turns_b = ChatTurns::start_with(b.store(), format!("{prefix}-b"), impatient(), heartbeat)
        .await
        .unwrap();
    (turns_a, turns_b)
}

#[tokio::test]
async fn the_turn_is_held_while_the_chain_runs_and_given_back_after() {
    for setup in [Setup::SingleLegacy, Setup::Cluster] {
        let (turns_a, turns_b) = two_replicas(setup, "handler").await;
        let ran = Arc::new(AtomicU32::new(0));
        let handler = dptree::entry()
            .chain(turns_a.handler::<HandlerError>())
            .endpoint({
                let (turns_b, ran) = (turns_b.clone(), Arc::clone(&ran));
                move |update: Update| {
                    let (turns_b, ran) = (turns_b.clone(), Arc::clone(&ran));
                    async move {
                        let chat = update.chat().unwrap().id;
                        let other = turns_b.acquire(chat).await;
                        assert!(
                            matches!(other, Err(TurnError::Acquire { .. })),
                            "another replica took the chat's turn while the handler ran: {other:?}"
                        );
                        ran.fetch_add(1, Ordering::Relaxed);
                        Err::<(), HandlerError>("the endpoint fails".into())
                    }
                }
            });
        let flow = handler.dispatch(dptree::deps![message_update(CHAT)]).await;
        assert!(
            matches!(&flow, ControlFlow::Break(Err(e)) if e.to_string() == "the endpoint fails"),
            "{setup:?}: the endpoint's error comes out unchanged: {flow:?}"
        );
        assert_eq!(ran.load(Ordering::Relaxed), 1);
        // Given back although the endpoint failed: the other replica gets it at once.
        let guard = turns_b.acquire(ChatId(CHAT)).await.unwrap();
        turns_b.release(&guard).await.unwrap();
    }
}

#[tokio::test]
async fn an_update_without_a_chat_takes_no_turn() {
    let (turns_a, turns_b) = two_replicas(Setup::SingleLegacy, "no-chat").await;
    let handler = dptree::entry()
        .chain(turns_a.handler::<HandlerError>())
        .endpoint(|update: Update| async move {
            assert!(update.chat().is_none());
            Ok::<(), HandlerError>(())
        });
    let flow = handler.dispatch(dptree::deps![inline_query_update()]).await;
    assert!(matches!(flow, ControlFlow::Break(Ok(()))), "{flow:?}");
    drop(turns_b);
}

#[tokio::test]
async fn a_turn_not_granted_breaks_the_chain_with_acquire() {
    let (turns_a, turns_b) = two_replicas(Setup::SingleLegacy, "not-granted").await;
    // Replica a holds the chat; replica b's handler cannot get it within its wait timeout.
    let held = turns_a.acquire(ChatId(CHAT)).await.unwrap();
    let ran = Arc::new(AtomicU32::new(0));
    let handler = dptree::entry()
        .chain(turns_b.handler::<HandlerError>())
        .endpoint({
            let ran = Arc::clone(&ran);
            move || {
                let ran = Arc::clone(&ran);
                async move {
                    ran.fetch_add(1, Ordering::Relaxed);
                    Ok::<(), HandlerError>(())
                }
            }
        });
    let flow = handler.dispatch(dptree::deps![message_update(CHAT)]).await;
    match flow {
        ControlFlow::Break(Err(e)) => {
            let turn = e.downcast::<TurnError>().unwrap();
            assert!(
                matches!(
                    *turn,
                    TurnError::Acquire {
                        chat: ChatId(CHAT),
                        ..
                    }
                ),
                "{turn:?}"
            );
        }
        other => panic!("expected the turn's error, got {other:?}"),
    }
    assert_eq!(
        ran.load(Ordering::Relaxed),
        0,
        "the endpoint must not run without the turn"
    );
    turns_a.release(&held).await.unwrap();
}
