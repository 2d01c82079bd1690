//! Every Lua script of `lua/`, declared once: each is a `static` [`Script`] here, and [`ALL`]
//! lists them for preloading and tests. Adding a script is one line of this manifest (and its
//! file); the plans that call it import it from here.

use crate::script::Script;

macro_rules! manifest {
    ($($(#[$meta:meta])* $ident:ident = $name:literal;)*) => {
        $(
            $(#[$meta])*
            pub static $ident: Script = Script::new(
                $name,
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $name, ".lua")),
            );
        )*

        /// Every script, in manifest order.
        pub static ALL: &[&Script] = &[$(&$ident),*];
    };
}

manifest! {
    // --- messages (store/messages)
    /// Stores a message item and its log entry atomically.
    SAVE_MESSAGE = "save_message";
    /// Reads messages by id, each only while both its item and its log entry exist.
    MESSAGE_ITEMS = "message_items";
    /// Finds the ids of the next page of a chat's log.
    MESSAGE_PAGE = "message_page";
    /// Deletes one message: log entry, drain entry and item together.
    DELETE_MESSAGE = "delete_message";
    // --- deleting a chat (store/delete_chat)
    /// Moves a chat's log into its drain (or merges it into a drain left by an interrupted
    /// delete) and returns the first chunk of ids.
    DELETE_CHAT_BEGIN = "delete_chat_begin";
    /// Deletes one chunk of the drain, ids and items together, and returns the next chunk.
    DELETE_CHAT_CHUNK = "delete_chat_chunk";
    // --- records (store/records)
    /// Stores a record and its bucket index member together.
    SET_INDEXED = "set_indexed";
    /// Stores a value with an optional TTL and its expiry-scored index member together.
    SET_EXPIRING_INDEXED = "set_expiring_indexed";
    /// Deletes a value and its index member together.
    DELETE_INDEXED = "delete_indexed";
    /// Drops the expired members of an expiry-scored index and lists the others.
    LIST_EXPIRING_INDEX = "list_expiring_index";
    // --- user data (store/user)
    /// Deletes several values of one index with their members.
    DELETE_INDEXED_CHUNK = "delete_indexed_chunk";
    // --- cursors (store/cursor)
    /// Raises a cursor: stores the value only when it is greater than the stored one.
    CURSOR_SET_IF_GREATER = "cursor_set_if_greater";
    // --- coordination (coord)
    /// Takes a lock or leadership and hands out the next fence or term.
    ACQUIRE_FENCED = "acquire_fenced";
    /// Renews a lock or leadership for its holder.
    EXTEND_IF_HOLDER = "extend_if_holder";
    /// Releases a lock or leadership for its holder.
    RELEASE_IF_HOLDER = "release_if_holder";
    /// A chat's turn queue: take, poll, skip, release, extend.
    TURN = "turn";
    /// A named lease: acquire, renew, release.
    LEASE = "lease";
    /// Schedule records guarded by fencing tokens: put, delete.
    SCHEDULE = "schedule";
    /// A durability table: inbound journal and outbox.
    DURABLE = "durable";
    // --- migration between the layouts (migrate)
    /// Reads a batch of keys with their TTLs (and the server's time).
    MIGRATE_READ = "migrate_read";
    /// Writes string records (chats, contacts, checkpoints, user data) of one group.
    MIGRATE_STRINGS = "migrate_strings";
    /// Writes messages of one chat, items with their log members.
    MIGRATE_MESSAGES = "migrate_messages";
    /// Writes schedules, keeping the higher fencing token.
    MIGRATE_SCHEDULES = "migrate_schedules";
    /// Raises fences, terms and cursors.
    MIGRATE_COUNTERS = "migrate_counters";
    /// Restores keys that keep their names (conversations, durability tables).
    MIGRATE_RESTORE = "migrate_restore";
    /// Copies a lease: token raised, a live holder rebased on the target's clock.
    MIGRATE_LEASE = "migrate_lease";
    /// Turns a legacy schedule the source no longer holds into a deleted marker.
    MIGRATE_PRUNE_SCHEDULE = "migrate_prune_schedule";
    /// Asks many logs and drains whether they name an item.
    MIGRATE_MEMBERS = "migrate_members";
    /// Deletes messages from a log (or drain), item and member together.
    MIGRATE_DROP = "migrate_drop";
    /// A side's lifecycle record: replaced by a migration step, stamped by `start()`.
    LIFECYCLE = "lifecycle";
}

#[cfg(test)]
mod tests {
    use super::ALL;

    #[test]
    fn every_lua_file_is_registered_once() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".lua").map(str::to_owned)
            })
            .collect();
        files.sort();
        let mut registered: Vec<String> = ALL.iter().map(|s| s.name().to_owned()).collect();
        registered.sort();
        assert_eq!(files, registered);
    }
}
