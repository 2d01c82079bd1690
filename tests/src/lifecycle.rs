//! Bots between the steps of a migration's lifecycle: what they write through the store API
//! (records, messages, checkpoints, user data, conversations, a cursor, the outbox), a model of
//! what they wrote, and a reading of a side through a store, to compare with the model.
//!
//! The reading goes through the store's API, as a bot would see the side: it is the same in
//! both layouts, so "the live side holds exactly what the bots wrote" is one comparison whatever
//! the layout and server the bots run on.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::{Error, Executor, Layout, Limit, Store, StoreOptions};

use crate::conformance::{Client, Runtime};
use crate::keyspace::{Node, Rng};

/// Chat ids the bots use: hostile to key names, as the layout contract demands.
pub const CHATS: [&str; 3] = ["c0", "c:1", "c{2} 😀"];
/// Message ids within a chat.
pub const MESSAGES: [&str; 3] = ["m0", "m:1", "m*2"];
/// Checkpoint ids.
pub const CHECKPOINTS: [&str; 2] = ["cp0", "cp%1"];
/// Users of the user data (namespace [`NS`]).
pub const USERS: [&str; 2] = ["u0", "u 1"];
/// User-data keys.
pub const USER_KEYS: [&str; 2] = ["lang", "tz:x"];
/// The user-data namespace.
pub const NS: &str = "prefs";
/// The cursor's name.
pub const CURSOR: &str = "feed";
/// The durability table.
pub const TABLE: &str = "out";

/// One keyspace of the lifecycle: a server, a layout, a prefix.
#[derive(Clone, Debug)]
pub struct Side {
    /// The server.
    pub node: Node<'static>,
    /// The layout.
    pub layout: Layout,
    /// The prefix.
    pub prefix: String,
}

impl Side {
    /// A store of this side, not started.
    pub async fn store<R: Runtime>(&self) -> Store<Client<R>> {
        let client = self.node.client::<R>().await;
        Store::new(
            client,
            StoreOptions::new(self.prefix.as_str()).layout(self.layout),
        )
        .unwrap()
    }

    /// A client of this side's server.
    pub async fn client<R: Runtime>(&self) -> Client<R> {
        self.node.client::<R>().await
    }

    /// Bots start here: a store's `start()`, which stamps the side's lifecycle record.
    pub async fn start<R: Runtime>(&self) -> Result<Store<Client<R>>, Error> {
        let store = self.store::<R>().await;
        store.start().await?;
        Ok(store)
    }

    /// Every key under the prefix with its type and value, to show that a refused step wrote
    /// nothing.
    pub fn raw(&self) -> BTreeMap<Vec<u8>, String> {
        self.node.raw_dump(&self.prefix)
    }
}

/// What the bots wrote, as they read it back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Data {
    /// Chat records.
    pub chats: BTreeMap<String, Bytes>,
    /// Messages by (chat, id): time and payload.
    pub messages: BTreeMap<(String, String), (i64, Bytes)>,
    /// Checkpoints (no TTL: the lifecycle tests are about steps days apart, not expiry).
    pub checkpoints: BTreeMap<String, Bytes>,
    /// User data by (user, key), namespace [`NS`].
    pub user: BTreeMap<(String, String), Bytes>,
    /// Conversation states.
    pub conversations: BTreeMap<String, Bytes>,
    /// The cursor.
    pub cursor: Option<i64>,
    /// Sends queued and not acked, by idempotency key.
    pub outbox: BTreeMap<String, Bytes>,
}

/// One write of a bot.
#[derive(Clone, Debug)]
pub enum Op {
    /// `upsert_chat`.
    UpsertChat(&'static str, Bytes),
    /// `delete_chat`: its messages and its record.
    DeleteChat(&'static str),
    /// `save_message`.
    SaveMessage(&'static str, &'static str, i64, Bytes),
    /// `delete_message`.
    DeleteMessage(&'static str, &'static str),
    /// `set_checkpoint` without a TTL.
    SetCheckpoint(&'static str, Bytes),
    /// `clear_checkpoint`.
    ClearCheckpoint(&'static str),
    /// `set_user_data` without a TTL.
    SetUser(&'static str, &'static str, Bytes),
    /// `delete_user_data`.
    DeleteUser(&'static str, &'static str),
    /// `clear_user_data` of one user ("forget me").
    ForgetUser(&'static str),
    /// `set_conversation` without a TTL.
    SetConversation(&'static str, Bytes),
    /// `delete_conversation`.
    DeleteConversation(&'static str),
    /// `set_cursor`.
    SetCursor(i64),
    /// The outbox's `enqueue` of a new key.
    Enqueue(String, Bytes),
    /// Claims every queued send and acks it: the sends went out.
    SendAll,
}

/// One of `items`, drawn by `rng`.
fn one(rng: &mut Rng, items: &[&'static str]) -> &'static str {
    items[rng.range(0, items.len() as u64) as usize]
}

impl Op {
    /// A random write; `n` numbers values and outbox keys so that each is new.
    pub fn random(rng: &mut Rng, n: &mut u64) -> Op {
        *n += 1;
        let value = || Bytes::from(format!("v{n}"));
        match rng.range(0, 16) {
            0 | 1 => Op::UpsertChat(one(rng, &CHATS), value()),
            2 => Op::DeleteChat(one(rng, &CHATS)),
            3 | 4 => Op::SaveMessage(one(rng, &CHATS), one(rng, &MESSAGES), *n as i64, value()),
            5 => Op::DeleteMessage(one(rng, &CHATS), one(rng, &MESSAGES)),
            6 => Op::SetCheckpoint(one(rng, &CHECKPOINTS), value()),
            7 => Op::ClearCheckpoint(one(rng, &CHECKPOINTS)),
            8 => Op::SetUser(one(rng, &USERS), one(rng, &USER_KEYS), value()),
            9 => Op::DeleteUser(one(rng, &USERS), one(rng, &USER_KEYS)),
            10 => Op::ForgetUser(one(rng, &USERS)),
            11 => Op::SetConversation(one(rng, &CHATS), value()),
            12 => Op::DeleteConversation(one(rng, &CHATS)),
            13 => Op::SetCursor(*n as i64 * if rng.chance(20) { -1 } else { 1 }),
            14 => Op::Enqueue(format!("send-{n}"), value()),
            _ => Op::SendAll,
        }
    }

    /// What the write does to the model.
    pub fn model(&self, d: &mut Data) {
        let s = |x: &str| x.to_owned();
        match self {
            Op::UpsertChat(c, v) => {
                d.chats.insert(s(c), v.clone());
            }
            Op::DeleteChat(c) => {
                d.chats.remove(*c);
                d.messages.retain(|(chat, _), _| chat != c);
            }
            Op::SaveMessage(c, id, t, v) => {
                d.messages.insert((s(c), s(id)), (*t, v.clone()));
            }
            Op::DeleteMessage(c, id) => {
                d.messages.remove(&(s(c), s(id)));
            }
            Op::SetCheckpoint(id, v) => {
                d.checkpoints.insert(s(id), v.clone());
            }
            Op::ClearCheckpoint(id) => {
                d.checkpoints.remove(*id);
            }
            Op::SetUser(u, k, v) => {
                d.user.insert((s(u), s(k)), v.clone());
            }
            Op::DeleteUser(u, k) => {
                d.user.remove(&(s(u), s(k)));
            }
            Op::ForgetUser(u) => d.user.retain(|(user, _), _| user != u),
            Op::SetConversation(c, v) => {
                d.conversations.insert(s(c), v.clone());
            }
            Op::DeleteConversation(c) => {
                d.conversations.remove(*c);
            }
            Op::SetCursor(v) => d.cursor = Some(*v),
            Op::Enqueue(key, v) => {
                d.outbox.insert(key.clone(), v.clone());
            }
            Op::SendAll => d.outbox.clear(),
        }
    }

    /// Performs the write through `store`.
    pub async fn apply<E: Executor>(&self, store: &Store<E>) -> Result<(), Error> {
        match self {
            Op::UpsertChat(c, v) => store.upsert_chat(c, v.clone()).await,
            Op::DeleteChat(c) => store.delete_chat(c).await.map(|_| ()),
            Op::SaveMessage(c, id, t, v) => {
                store.save_message(c, id, *t, v.clone()).await.map(|_| ())
            }
            Op::DeleteMessage(c, id) => store.delete_message(c, id).await.map(|_| ()),
            Op::SetCheckpoint(id, v) => store.set_checkpoint(id, v.clone(), None).await,
            Op::ClearCheckpoint(id) => store.clear_checkpoint(id).await.map(|_| ()),
            Op::SetUser(u, k, v) => store.set_user_data(u, NS, k, v.clone(), None).await,
            Op::DeleteUser(u, k) => store.delete_user_data(u, NS, k).await.map(|_| ()),
            Op::ForgetUser(u) => store.clear_user_data(u, None).await.map(|_| ()),
            Op::SetConversation(c, v) => store.set_conversation(c, v.clone(), None).await,
            Op::DeleteConversation(c) => store.delete_conversation(c).await.map(|_| ()),
            Op::SetCursor(v) => store.set_cursor(CURSOR, *v).await,
            Op::Enqueue(key, v) => {
                let queued = store
                    .durability(TABLE)?
                    .enqueue(key, v.clone(), Duration::from_secs(3600))
                    .await?;
                assert!(queued, "send {key} was new and must be queued");
                Ok(())
            }
            Op::SendAll => {
                let outbox = store.durability(TABLE)?;
                for send in outbox
                    .claim("sender", Limit::MAX, Duration::from_secs(60))
                    .await?
                {
                    outbox.ack(&send.key, "sender").await?;
                }
                Ok(())
            }
        }
    }
}

/// Applies `ops` through `store` and to `model`.
pub async fn write<E: Executor>(store: &Store<E>, model: &mut Data, ops: &[Op]) {
    for op in ops {
        op.apply(store)
            .await
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
        op.model(model);
    }
}

/// Reads what a bot sees through `store`: every datum the ops can write. The outbox is read
/// by claiming every queued send and putting the claims back (`recover`), as a sender that
/// stopped would leave them.
pub async fn read<E: Executor>(store: &Store<E>) -> Data {
    let mut d = Data::default();
    for c in CHATS {
        if let Some(v) = store.get_chat(c).await.unwrap() {
            d.chats.insert(c.to_owned(), v);
        }
        let page = store.list_messages(c, .., None, Limit::MAX).await.unwrap();
        for m in page.items {
            d.messages
                .insert((c.to_owned(), m.id), (m.time_ms, m.payload));
        }
        if let Some(v) = store.get_conversation(c).await.unwrap() {
            d.conversations.insert(c.to_owned(), v);
        }
    }
    for cp in CHECKPOINTS {
        if let Some(v) = store.get_checkpoint(cp).await.unwrap() {
            d.checkpoints.insert(cp.to_owned(), v);
        }
    }
    for u in USERS {
        for k in USER_KEYS {
            if let Some(v) = store.get_user_data(u, NS, k).await.unwrap() {
                d.user.insert((u.to_owned(), k.to_owned()), v);
            }
        }
    }
    d.cursor = store.get_cursor(CURSOR).await.unwrap();
    let outbox = store.durability(TABLE).unwrap();
    for send in outbox
        .claim("reader", Limit::MAX, Duration::from_secs(60))
        .await
        .unwrap()
    {
        d.outbox.insert(send.key, send.payload);
    }
    outbox.recover("reader").await.unwrap();
    d
}

/// Panics unless `side` reads back exactly `expected` through a store.
pub async fn assert_holds<R: Runtime>(what: &str, side: &Side, expected: &Data) {
    let store = side.store::<R>().await;
    let got = read(&store).await;
    assert_eq!(&got, expected, "{what}: {side:?}");
}
