//! `forward FROM TO { except ZONES }`: the zone's `except` list. CoreDNS
//! passes an excepted name to the next plugin, and with none after
//! `forward` answers SERVFAIL; nodens answers SERVFAIL there too.

use super::super::corefile::Directive;
use super::Plan;
use super::block_out::BlockOut;
use crate::config::ZoneName;

pub(super) fn except(option: &Directive, out: &mut BlockOut, plan: &mut Plan) {
    for t in &option.args {
        match t.text.parse::<ZoneName>() {
            Ok(zone) => {
                let name = match zone.0.trim_end_matches('.') {
                    "" => ".".to_string(),
                    n => n.to_string(),
                };
                if !out.rules.except.contains(&name) {
                    out.rules.except.push(name);
                }
            }
            Err(_) => plan.untranslated.add(
                t.line,
                format!("forward except `{}`: not a domain name", t.text),
            ),
        }
    }
}
