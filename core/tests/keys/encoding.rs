//! Commands are written by the core's own RESP2 writer; redis-protocol is its reference. These
//! properties check that the two agree byte for byte, for plain commands and script calls, and
//! that what is written decodes back to the arguments.

use botmesh_redis_core::driver::request::encode_args;
use botmesh_redis_core::{Access, Key, Request};
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use redis_protocol::resp2::types::BytesFrame;

/// redis-protocol's encoding of `args` as an array of bulk strings.
fn reference(args: &[Bytes]) -> BytesMut {
    let frame = BytesFrame::Array(args.iter().cloned().map(BytesFrame::BulkString).collect());
    let mut buf = BytesMut::new();
    redis_protocol::resp2::encode::extend_encode(&mut buf, &frame, false).unwrap();
    buf
}

/// Arguments whose lengths cross the digit boundaries of the length headers (9/10, 99/100, ...).
fn args() -> impl Strategy<Value = Vec<Bytes>> {
    let len = prop_oneof![0usize..12, 95usize..105, 995usize..1005];
    let arg =
        len.prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n).prop_map(Bytes::from));
    proptest::collection::vec(arg, 0..14)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn commands_encode_as_redis_protocol_does(args in args()) {
        let mut ours = BytesMut::from(&b"already here"[..]);
        encode_args(args.clone(), &mut ours);
        let mut expected = BytesMut::from(&b"already here"[..]);
        expected.extend_from_slice(&reference(&args));
        prop_assert_eq!(ours, expected);
    }

    #[test]
    fn script_calls_encode_as_their_argument_vector(
        keys in 1usize..12,
        args in args(),
        with_source in any::<bool>(),
    ) {
        // Keys of one tag, so that the call is one slot whatever their number.
        let keys: Vec<Key> = (0..keys).map(|i| Key::new(format!("p:{{t}}:{i}"))).collect();
        let req = Request::script(&botmesh_redis_core::driver::scripts::SAVE_MESSAGE, Access::Write, keys, args)
            .unwrap();
        let mut ours = BytesMut::new();
        req.encode(with_source, &mut ours);
        prop_assert_eq!(ours, reference(&req.wire_args(with_source)));
    }

    #[test]
    fn encoded_commands_decode_to_their_arguments(args in args()) {
        prop_assume!(!args.is_empty());
        let mut buf = BytesMut::new();
        encode_args(args.clone(), &mut buf);
        let (frame, used) = redis_protocol::resp2::decode::decode_bytes(&buf.clone().freeze())
            .unwrap()
            .expect("a complete frame");
        prop_assert_eq!(used, buf.len());
        let decoded: Vec<Bytes> = match frame {
            BytesFrame::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    BytesFrame::BulkString(b) => b,
                    other => panic!("not a bulk string: {other:?}"),
                })
                .collect(),
            other => panic!("not an array: {other:?}"),
        };
        prop_assert_eq!(decoded, args);
    }
}

#[test]
fn a_command_is_an_array_of_bulk_strings() {
    let req = Request::cmd(Access::Write, "SET")
        .key(Key::new(&b"k"[..]))
        .arg(Bytes::from(vec![b'v'; 10]))
        .build()
        .unwrap();
    let mut buf = BytesMut::new();
    req.encode(false, &mut buf);
    assert_eq!(
        &buf[..],
        &b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nvvvvvvvvvv\r\n"[..]
    );
}
