//! The checker can fail: bad headers and bodies are rejected, naming their case.

use crate::body::*;
use crate::header::*;

pub(crate) const HEADER: &str = "\
-- t: a test script.
-- KEYS[1] a key
-- KEYS[2] another key
-- ARGV[1] a value
-- Returns something
";

pub(crate) fn body(code: &str) -> String {
    format!("{HEADER}{code}\n")
}

pub(crate) fn rejected(stem: &str, src: &str) -> String {
    match check_script(stem, src) {
        Ok(h) => panic!("accepted a bad script ({h:?}):\n{src}"),
        Err(problems) => problems.join("\n"),
    }
}

/// Each script body (under a valid header) is rejected, with a problem that names its case.
pub(crate) fn assert_bodies_rejected(cases: &[(&str, &str)]) {
    for &(code, expected) in cases {
        let problems = rejected("t", &body(code));
        assert!(
            problems.contains(expected),
            "{code}: expected {expected:?} in\n{problems}"
        );
    }
}

#[test]
pub(crate) fn a_good_script_is_accepted() {
    let src = body(
        "local log = KEYS[1]\n\
         local a, b = KEYS[1], KEYS[2]\n\
         -- redis.call('GET', 'in a comment ' .. ARGV[1])\n\
         --[[ redis.call('GET', 'in a long comment') ]]\n\
         local s = \"redis.call('GET', 'in a string')\"\n\
         local t = redis.call('TIME')\n\
         redis.call('ZADD', log, ARGV[1], 'm')\n\
         redis.call('RENAME', a, b)\n\
         redis.call(\n  'SET',\n  KEYS[2],\n  ARGV[1]\n)\n\
         redis.call('ZUNIONSTORE', KEYS[1], 1, KEYS[2])\n\
         redis.pcall('DEL', KEYS[1], b)\n\
         return redis.call('exists', KEYS[2])",
    );
    let header = check_script("t", &src).unwrap();
    assert_eq!(header.keys.count, 2);
    assert_eq!(header.argv.count, 1);
    assert_eq!(header.lines, 5);
}

#[test]
pub(crate) fn variable_tails_allow_computed_indexes_and_spreads() {
    let src = "\
-- t: deletes a chunk.
-- KEYS[1] the log
-- KEYS[2..] the items
-- ARGV[1..] the members
-- Returns the number deleted
for i = 2, #KEYS do redis.call('UNLINK', KEYS[i]) end
for _, item in ipairs(KEYS) do redis.call('TOUCH', item) end
redis.call('ZREM', KEYS[1], unpack(ARGV))
redis.call('ZUNIONSTORE', KEYS[1], #KEYS - 1, unpack(KEYS, 2))
return redis.call('DEL', KEYS[1], unpack(KEYS, 2))
";
    let header = check_script("t", src).unwrap();
    assert_eq!(
        header.keys,
        Declared {
            count: 1,
            tail_from: Some(2)
        }
    );
    assert_eq!(
        header.argv,
        Declared {
            count: 0,
            tail_from: Some(1)
        }
    );
}

#[test]
pub(crate) fn a_key_built_from_argv_is_rejected() {
    let problems = rejected("t", &body("return redis.call('GET', 'bot:' .. ARGV[1])"));
    assert_eq!(
        problems,
        "line 6: GET: key argument 1 is `\"bot:\" .. ARGV [ 1 ]`, not KEYS[n] or a local bound to one"
    );
}

#[test]
pub(crate) fn keys_that_are_not_declared_keys_are_rejected() {
    let cases = [
        ("redis.call('GET', ARGV[1])", "GET: key argument 1"),
        ("redis.call('SET', 'bot:meta', 1)", "SET: key argument 1"),
        ("redis.call('GET', KEYS[1] .. ':x')", "GET: key argument 1"),
        (
            "redis.call('GET', KEYS[1] .. KEYS[2])",
            "GET: key argument 1",
        ),
        ("redis.call('GET')", "GET: missing key argument 1"),
        (
            "redis.call('RENAME', KEYS[1], KEYS[1] .. ':old')",
            "RENAME: key argument 2",
        ),
        ("redis.call('COPY', 'x', KEYS[2])", "COPY: key argument 1"),
        (
            "redis.call('LMOVE', KEYS[1], ARGV[1], 'LEFT', 'RIGHT')",
            "LMOVE: key argument 2",
        ),
        (
            "redis.call('RPOPLPUSH', KEYS[1], 'x')",
            "RPOPLPUSH: key argument 2",
        ),
        (
            "redis.call('SMOVE', KEYS[1], 'x', 'm')",
            "SMOVE: key argument 2",
        ),
        (
            "redis.call('ZRANGESTORE', KEYS[1], 'x', 0, -1)",
            "ZRANGESTORE: key argument 2",
        ),
        (
            "redis.call('ZUNIONSTORE', KEYS[1], 2, KEYS[2], 'x')",
            "ZUNIONSTORE: key argument 4",
        ),
        (
            "redis.call('ZINTERSTORE', 'x', 1, KEYS[2])",
            "ZINTERSTORE: key argument 1",
        ),
        (
            "redis.call('ZUNIONSTORE', KEYS[1], n, KEYS[2])",
            "ZUNIONSTORE: numkeys `n`",
        ),
        ("redis.call('DEL', KEYS[1], 'x')", "DEL: key argument 2"),
        ("redis.call('DEL', unpack(ARGV))", "DEL: key argument 1"),
        (
            "redis.call('MSET', KEYS[1], 1, 'x', 2)",
            "MSET: key argument 3",
        ),
        (
            "redis.call(cmd, KEYS[1])",
            "the command `cmd` is not a string literal",
        ),
        (
            "redis.call(\n'SET',\n'multi' .. 'line',\n1)",
            "line 8: SET: key argument 1",
        ),
    ];
    assert_bodies_rejected(&cases);
}

#[test]
pub(crate) fn locals_that_are_not_pure_keys_are_rejected() {
    let cases = [
        "local k = KEYS[1] .. ':x'\nredis.call('GET', k)",
        "local k = KEYS[1]\nk = 'bot:' .. ARGV[1]\nredis.call('GET', k)",
        "local k = KEYS[1]\nif ARGV[1] then local k = 'x' end\nredis.call('GET', k)",
        "local k, j = KEYS[1], 'x'\nredis.call('GET', j)",
        "local k = ARGV[1]\nredis.call('GET', k)",
        "local function get(k) return redis.call('GET', k) end",
        "for k = 1, 2 do redis.call('GET', k) end",
        "for _, k in ipairs(ARGV) do redis.call('GET', k) end",
    ];
    assert_bodies_rejected(&cases.map(|code| (code, "GET: key argument 1")));
}

#[test]
pub(crate) fn undeclared_keys_and_argv_are_rejected() {
    let cases = [
        (
            "return KEYS[3]",
            "line 6: KEYS[3] is not declared in the header",
        ),
        (
            "return ARGV[2]",
            "line 6: ARGV[2] is not declared in the header",
        ),
        ("return KEYS[0]", "KEYS[0] is not declared"),
        ("return KEYS[i]", "KEYS[i] has a computed index"),
        ("return ARGV[#ARGV]", "ARGV[# ARGV] has a computed index"),
        ("KEYS[1] = 'bot:x'", "KEYS[...] is assigned to"),
        ("KEYS = {'bot:x'}", "KEYS is assigned to"),
    ];
    assert_bodies_rejected(&cases);
}

#[test]
pub(crate) fn bad_headers_are_rejected() {
    let cases = [
        ("return 1", "no header"),
        (
            "-- other: wrong stem.\n-- KEYS[1] k\n-- Returns x\nreturn 1",
            "line 1 must be `-- t: ...`",
        ),
        (
            "-- t: no keys.\n-- ARGV[1] a\n-- Returns x\nreturn 1",
            "no `-- KEYS[1] ...` line",
        ),
        (
            "-- t: no returns.\n-- KEYS[1] k\nreturn 1",
            "expected one `-- Returns ...` line, found 0",
        ),
        (
            "-- t: gap.\n-- KEYS[1] k\n-- KEYS[3] k\n-- Returns x\nreturn 1",
            "line 3: expected KEYS[2], found KEYS[3]",
        ),
        (
            "-- t: order.\n-- ARGV[1] a\n-- KEYS[1] k\n-- Returns x\nreturn 1",
            "line 3: KEYS[1] is out of order",
        ),
        (
            "-- t: late.\n-- KEYS[1] k\n-- Returns x\n-- ARGV[1] a\nreturn 1",
            "line 4: ARGV[1] is out of order",
        ),
        (
            "-- t: bare.\n-- KEYS[1]\n-- Returns x\nreturn 1",
            "KEYS[1] has no description",
        ),
        (
            "-- t: tail.\n-- KEYS[1..] k\n-- KEYS[2] k\n-- Returns x\nreturn 1",
            "line 3: KEYS line after a variable tail",
        ),
        (
            "-- t: two returns.\n-- KEYS[1] k\n-- Returns x\n-- Returns y\nreturn 1",
            "found 2",
        ),
        (
            "-- t: blank line.\n\n-- KEYS[1] k\n-- Returns x\nreturn 1",
            "no `-- KEYS[1]",
        ),
    ];
    for (src, expected) in cases {
        let problems = rejected("t", src);
        assert!(
            problems.contains(expected),
            "{src}: expected {expected:?} in\n{problems}"
        );
    }
}
