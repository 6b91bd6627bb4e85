//! The dnstap message (dnstap.proto, proto2), as prost structs written by
//! hand: the schema is small and fixed, so no build script or protoc.
//! Field numbers and enum values are the schema's.

/// `Dnstap`: one frame's payload.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Dnstap {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub(super) identity: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub(super) version: Option<Vec<u8>>,
    /// nodens puts the client's pod here: `pod=namespace/name`.
    #[prost(bytes = "vec", optional, tag = "3")]
    pub(super) extra: Option<Vec<u8>>,
    #[prost(message, optional, tag = "14")]
    pub(super) message: Option<Message>,
    /// `Dnstap.Type`: [`MESSAGE`] is the only one.
    #[prost(int32, required, tag = "15")]
    pub(super) r#type: i32,
}

/// `Dnstap.Type.MESSAGE`.
pub(super) const MESSAGE: i32 = 1;

/// `Message`: one DNS message seen by the server.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Message {
    /// `Message.Type` ([`MessageType`]).
    #[prost(int32, required, tag = "1")]
    pub(super) r#type: i32,
    /// `SocketFamily`: INET 1, INET6 2.
    #[prost(int32, optional, tag = "2")]
    pub(super) socket_family: Option<i32>,
    /// `SocketProtocol`: UDP 1, TCP 2, DOT 3.
    #[prost(int32, optional, tag = "3")]
    pub(super) socket_protocol: Option<i32>,
    #[prost(bytes = "vec", optional, tag = "4")]
    pub(super) query_address: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub(super) response_address: Option<Vec<u8>>,
    #[prost(uint32, optional, tag = "6")]
    pub(super) query_port: Option<u32>,
    #[prost(uint32, optional, tag = "7")]
    pub(super) response_port: Option<u32>,
    #[prost(uint64, optional, tag = "8")]
    pub(super) query_time_sec: Option<u64>,
    #[prost(fixed32, optional, tag = "9")]
    pub(super) query_time_nsec: Option<u32>,
    #[prost(bytes = "vec", optional, tag = "10")]
    pub(super) query_message: Option<Vec<u8>>,
    #[prost(uint64, optional, tag = "12")]
    pub(super) response_time_sec: Option<u64>,
    #[prost(fixed32, optional, tag = "13")]
    pub(super) response_time_nsec: Option<u32>,
    #[prost(bytes = "vec", optional, tag = "14")]
    pub(super) response_message: Option<Vec<u8>>,
}

/// `Message.Type`: the kinds nodens sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MessageType {
    ClientQuery = 5,
    ClientResponse = 6,
    ForwarderQuery = 7,
    ForwarderResponse = 8,
}

pub(super) const INET: i32 = 1;
pub(super) const INET6: i32 = 2;
pub(super) const UDP: i32 = 1;
pub(super) const TCP: i32 = 2;
/// DNS over TLS (dnstap.proto's `DOT`).
pub(super) const DOT: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    /// The bytes of a small message, checked against the protobuf wire
    /// format by hand: the tags and wire types are the schema's.
    #[test]
    fn encodes_the_schema_field_numbers() {
        let tap = Dnstap {
            identity: Some(b"n".to_vec()),
            version: None,
            extra: None,
            message: Some(Message {
                r#type: MessageType::ClientQuery as i32,
                query_port: Some(53),
                query_time_nsec: Some(1),
                ..Message::default()
            }),
            r#type: MESSAGE,
        };
        let bytes = tap.encode_to_vec();
        // identity (1, len) "n"; message (14, len) { type (1) 5,
        // query_port (6) 53, query_time_nsec (9, fixed32) 1 }; type (15) 1.
        let want: &[u8] = &[
            0x0a, 1, b'n', 0x72, 9, 0x08, 5, 0x30, 53, 0x4d, 1, 0, 0, 0, 0x78, 1,
        ];
        assert_eq!(bytes, want);
        assert_eq!(Dnstap::decode(want).unwrap(), tap);
    }
}
