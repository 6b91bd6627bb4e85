//! Unit tests of `wire::query`.

use super::*;

fn query(name: &[u8], qtype: u16, extra: &[u8], arcount: u16) -> Vec<u8> {
    let mut p = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0];
    p.extend(arcount.to_be_bytes());
    p.extend(name);
    p.extend(qtype.to_be_bytes());
    p.extend(1u16.to_be_bytes());
    p.extend(extra);
    p
}

const OPT_DO_4096: &[u8] = &[0, 0, 41, 0x10, 0, 0, 0, 0x80, 0, 0, 0];

#[test]
fn plain_query() {
    let p = query(b"\x03www\x04Test\x00", 1, &[], 0);
    let q = parse(&p).unwrap();
    assert_eq!(q.id, 0x1234);
    assert_eq!(q.name(), b"\x03www\x04Test\x00");
    assert_eq!(q.qtype, 1);
    assert_eq!(q.edns, None);
    assert_eq!(q.udp_limit(1232), 512);
}

#[test]
fn edns_query() {
    let p = query(b"\x01a\x00", 28, OPT_DO_4096, 1);
    let q = parse(&p).unwrap();
    assert_eq!(
        q.edns,
        Some(Edns {
            udp_size: 4096,
            dnssec_ok: true
        })
    );
    assert_eq!(q.udp_limit(1232), 1232);
}

#[test]
fn rejects() {
    assert!(matches!(parse(&[0; 5]), Err(Reject::Drop(_))));
    let mut resp = query(b"\x01a\x00", 1, &[], 0);
    resp[2] |= 0x80;
    assert!(matches!(parse(&resp), Err(Reject::Drop(_))));
    let mut notify = query(b"\x01a\x00", 1, &[], 0);
    notify[2] |= 4 << 3;
    assert!(matches!(
        parse(&notify),
        Err(Reject::Answer {
            rcode: rcode::NOTIMP,
            ..
        })
    ));
    let reason_of = |packet: &[u8]| parse(packet).err().map(|r| r.reason());
    assert_eq!(reason_of(&notify), Some("opcode not supported"));
    let probe = [0x4e, 0x50, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(reason_of(&probe), Some(STATUS_PROBE));
    let mut status_with_question = query(b"\x01a\x00", 1, &[], 0);
    status_with_question[2] |= 2 << 3;
    assert_eq!(
        reason_of(&status_with_question),
        Some("opcode not supported")
    );
    let two_opt = query(b"\x01a\x00", 1, &[OPT_DO_4096, OPT_DO_4096].concat(), 2);
    assert!(matches!(
        parse(&two_opt),
        Err(Reject::Answer {
            rcode: rcode::FORMERR,
            ..
        })
    ));
    let mut v1 = OPT_DO_4096.to_vec();
    v1[6] = 1;
    let badvers = query(b"\x01a\x00", 1, &v1, 1);
    assert!(matches!(
        parse(&badvers),
        Err(Reject::Answer {
            rcode: rcode::BADVERS,
            edns: Some(_),
            ..
        })
    ));
    let axfr = query(b"\x01a\x00", rtype::AXFR, &[], 0);
    assert!(matches!(
        parse(&axfr),
        Err(Reject::Answer {
            rcode: rcode::REFUSED,
            ..
        })
    ));
    let mut notify_edns = query(b"\x01a\x00", 1, OPT_DO_4096, 1);
    notify_edns[2] |= 4 << 3;
    assert!(
        matches!(
            parse(&notify_edns),
            Err(Reject::Answer {
                rcode: rcode::NOTIMP,
                edns: Some(Edns {
                    dnssec_ok: true,
                    ..
                }),
                ..
            })
        ),
        "NOTIMP keeps the client's OPT (RFC 6891 section 7)"
    );
    let mut no_question = query(b"\x01a\x00", 1, OPT_DO_4096, 1);
    no_question.truncate(HEADER_LEN);
    no_question[5] = 0;
    no_question.extend(OPT_DO_4096);
    assert!(matches!(
        parse(&no_question),
        Err(Reject::Answer {
            rcode: rcode::FORMERR,
            edns: Some(_),
            ..
        })
    ));
    for qclass in [0u16, 2, 4, 254, 255, 65535] {
        let mut p = query(b"\x01a\x00", 1, &[], 0);
        let at = p.len() - 2;
        p[at..].copy_from_slice(&qclass.to_be_bytes());
        assert!(
            matches!(
                parse(&p),
                Err(Reject::Answer {
                    rcode: rcode::REFUSED,
                    question_end: Some(_),
                    ..
                })
            ),
            "class {qclass}"
        );
    }
    let mut chaos = query(b"\x07version\x04bind\x00", 16, &[], 0);
    let at = chaos.len() - 2;
    chaos[at..].copy_from_slice(&3u16.to_be_bytes());
    assert!(parse(&chaos).is_ok(), "CH is served");
    let missing_opt = query(b"\x01a\x00", 1, &[], 1);
    assert!(matches!(
        parse(&missing_opt),
        Err(Reject::Answer {
            rcode: rcode::FORMERR,
            question_end: Some(_),
            ..
        })
    ));
}
