//! Rust-side examples; the invariants under any operation sequence are tested from Python
//! (state machine and differential tests), against the reference.

use super::*;
use crate::config::PinHandover;
use crate::policy::PolicyConfig;

fn setup() -> (ProgramScheduler, TTLPolicy) {
    let policy = TTLPolicy::new(PolicyConfig::default()).unwrap();
    (ProgramScheduler::new(1000, 100).unwrap(), policy)
}

fn pinning(tool: &str) -> TurnEnd<'_> {
    TurnEnd {
        tool: Some(tool),
        cache_miss_cost_s: Some(100.0),
        ..TurnEnd::default()
    }
}

#[test]
fn pin_is_consumed_by_the_next_arrival_which_jumps_the_queue() {
    let (mut s, mut pol) = setup();
    s.arrive(&mut pol, "a1", "A", 0.0, 10).unwrap();
    assert_eq!(s.pop(&mut pol, 0.0).unwrap().as_deref(), Some("a1"));
    s.arrive(&mut pol, "b1", "B", 1.0, 10).unwrap();
    let fin = s.finish(&mut pol, "a1", 2.0, 40, pinning("grep")).unwrap();
    let ttl = fin.decision.unwrap().ttl_s;
    assert!(ttl > 0.0);
    assert_eq!(fin.pin.as_ref().unwrap().deadline_s, 2.0 + ttl);
    assert_eq!(s.pinned_blocks(), 40);
    let consumed = s.arrive(&mut pol, "a2", "A", 5.0, 10).unwrap();
    assert_eq!(consumed, fin.pin);
    assert_eq!(pol.tool_count("", Some("grep")), 1);
    assert_eq!(s.pinned_blocks(), 0);
    assert_eq!(s.peek().map(|id| &**id), Some("a2"));
}

#[test]
fn programs_arriving_at_one_instant_keep_the_order_seen_in_queue_and_reclaim() {
    let (mut s, mut pol) = setup();
    for p in ["Z", "M", "A"] {
        // seen in this order, all at 0.0: ids sort the other way
        s.arrive(&mut pol, &format!("{p}1"), p, 0.0, 10).unwrap();
    }
    assert_eq!(s.pop(&mut pol, 0.0).unwrap().as_deref(), Some("Z1"));
    let free = TurnEnd {
        tool: Some("t"),
        cache_miss_cost_s: Some(0.0),
        ..TurnEnd::default()
    };
    s.finish(&mut pol, "Z1", 1.0, 10, free).unwrap();
    // Z's return goes before M's and A's first requests, though they waited longer
    s.arrive(&mut pol, "Z2", "Z", 2.0, 10).unwrap();
    assert_eq!(s.priority("Z2").unwrap().program_order, 0);
    let popped: Vec<_> = (0..3)
        .map(|_| s.pop(&mut pol, 2.0).unwrap().unwrap().to_string())
        .collect();
    assert_eq!(popped, ["Z2", "M1", "A1"]);
    for rid in ["Z2", "M1", "A1"] {
        assert!(s
            .finish(&mut pol, rid, 3.0, 10, pinning("t"))
            .unwrap()
            .pin
            .is_some());
    }
    let ids = |pins: Vec<Pin>| {
        pins.iter()
            .map(|p| p.program_id.to_string())
            .collect::<Vec<_>>()
    };
    // the program seen last yields first; M keeps its own pin and Z's
    assert_eq!(ids(s.reclaim_for(100, 3.0, Some("M")).unwrap()), ["A"]);
    assert_eq!(ids(s.reclaim(100, 3.0).unwrap()), ["M", "Z"]);
}

#[test]
fn reclaim_latest_program_first_and_expire_by_deadline() {
    let (mut s, mut pol) = setup();
    for (i, p) in ["A", "B", "C"].iter().enumerate() {
        let rid = format!("{p}1");
        s.arrive(&mut pol, &rid, p, i as f64, 1).unwrap();
        s.pop(&mut pol, i as f64).unwrap();
    }
    for (p, blocks) in [("C", 10), ("A", 20), ("B", 30)] {
        let fin = s
            .finish(&mut pol, &format!("{p}1"), 3.0, blocks, pinning("t"))
            .unwrap();
        assert!(fin.pin.is_some());
    }
    let released: Vec<_> = s
        .reclaim(35, 3.0)
        .unwrap()
        .into_iter()
        .map(|p| (p.program_id.to_string(), p.blocks))
        .collect();
    assert_eq!(released, [("C".to_owned(), 10), ("B".to_owned(), 30)]);
    let deadline = s.next_deadline_s().unwrap();
    assert!(s.expire(deadline - 1e-9).unwrap().is_empty());
    assert_eq!(s.expire(deadline).unwrap().len(), 1);
    assert_eq!(s.pin_count(), 0);
}

#[test]
fn reclaim_for_a_program_keeps_its_own_and_older_pins() {
    let (mut s, mut pol) = setup();
    for (i, p) in ["A", "B", "C"].iter().enumerate() {
        let rid = format!("{p}1");
        s.arrive(&mut pol, &rid, p, i as f64, 1).unwrap();
        s.pop(&mut pol, i as f64).unwrap();
    }
    for p in ["A", "B", "C"] {
        let fin = s.finish(&mut pol, &format!("{p}1"), 3.0, 10, pinning("t"));
        assert!(fin.unwrap().pin.is_some());
    }
    let ids = |pins: Vec<Pin>| -> Vec<String> {
        pins.into_iter().map(|p| p.program_id.to_string()).collect()
    };
    assert_eq!(ids(s.reclaim_for(100, 3.0, Some("B")).unwrap()), ["C"]);
    assert!(s.reclaim_for(100, 3.0, Some("B")).unwrap().is_empty());
    assert_eq!(ids(s.reclaim(100, 3.0).unwrap()), ["B", "A"]);
    assert!(matches!(
        s.reclaim_for(1, 3.0, Some("nobody")),
        Err(Error::UnknownKey { .. })
    ));
}

#[test]
fn errors_change_nothing() {
    let (mut s, mut pol) = setup();
    s.arrive(&mut pol, "a1", "A", 5.0, 1).unwrap();
    let back = s.arrive(&mut pol, "x", "X", 4.0, 1).unwrap_err();
    assert_eq!(back.field(), Some("now"));
    assert!(matches!(
        s.finish(&mut pol, "zz", 6.0, 1, TurnEnd::default()),
        Err(Error::UnknownKey { .. })
    ));
    assert!(s
        .finish(&mut pol, "a1", 6.0, 1, TurnEnd::default())
        .is_err()); // waiting
    assert!(s.arrive(&mut pol, "a1", "A", 6.0, 1).is_err()); // duplicate
    assert!(s.arrive(&mut pol, "", "A", 6.0, 1).is_err());
    assert!(s.arrive(&mut pol, "y", "A", 6.0, 1001).is_err());
    assert_eq!((s.waiting_count(), s.program_count()), (1, 1));
    let ended = s.abort(&mut pol, "a1").unwrap();
    assert_eq!(ended.request_ids, vec![Arc::<str>::from("a1")]);
    assert_eq!((s.waiting_count(), s.program_count()), (0, 0));
}

#[test]
fn id_prefix_orders_like_the_id() {
    let ids = [
        "",
        "a",
        "ab",
        "ab\0",
        "ab\0c",
        "abcdefgh",
        "abcdefgh\0",
        "abcdefghi",
        "é",
        "z",
    ];
    for a in ids {
        for b in ids {
            let (ka, kb) = (
                Priority::new(false, false, 0.0, 0, 0.0, &Arc::from(a)),
                Priority::new(false, false, 0.0, 0, 0.0, &Arc::from(b)),
            );
            assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?}");
        }
    }
}

#[test]
fn published_rule_hands_the_pin_over_at_schedule() {
    let mut pol = TTLPolicy::new(PolicyConfig::published()).unwrap();
    let mut s = ProgramScheduler::new(1000, 1000)
        .unwrap()
        .with_pin_handover(PinHandover::Schedule);
    s.arrive(&mut pol, "a1", "A", 0.0, 10).unwrap();
    s.pop(&mut pol, 0.0).unwrap();
    let fin = s.finish(&mut pol, "a1", 1.0, 40, pinning("ls")).unwrap();
    // Cold start, Exp(1 s) prior, cost 1: τ = ln B.
    assert!((fin.decision.unwrap().ttl_s - 100f64.ln()).abs() < 1e-12);
    let deadline = fin.pin.unwrap().deadline_s;
    assert_eq!(s.arrive(&mut pol, "a2", "A", 2.0, 10).unwrap(), None);
    // A request waits: the pin outlives its deadline; at the deadline exactly nothing expires.
    assert!(s.expire(deadline + 50.0).unwrap().is_empty());
    assert_eq!(s.pinned_blocks(), 40);
    assert_eq!(
        s.pop(&mut pol, deadline + 50.0).unwrap().as_deref(),
        Some("a2")
    );
    assert_eq!((s.pinned_blocks(), pol.out_of_order_cost_s()), (0, 0.0));
}

#[test]
fn idle_programs_are_capped_oldest_idle_first() {
    let mut pol = TTLPolicy::new(PolicyConfig::default()).unwrap();
    let mut s = ProgramScheduler::with_max_idle_programs(1000, 0, 2).unwrap();
    for (i, p) in ["A", "B", "C"].iter().enumerate() {
        let r = format!("{p}1");
        let t = i as f64;
        s.arrive(&mut pol, &r, p, t, 1).unwrap();
        s.pop(&mut pol, t).unwrap();
        s.finish(&mut pol, &r, t, 1, TurnEnd::default()).unwrap();
    }
    // A went idle first: forgotten; B and C are kept.
    assert_eq!(s.program_count(), 2);
    assert_eq!(s.dropped_idle_programs(), 1);
    assert!(matches!(
        s.end_program(&mut pol, "A"),
        Err(Error::UnknownKey { .. })
    ));
    // B returns (no longer idle), then goes idle again: now C is the oldest idle.
    s.arrive(&mut pol, "B2", "B", 3.0, 1).unwrap();
    s.pop(&mut pol, 3.0).unwrap();
    s.finish(&mut pol, "B2", 3.0, 1, TurnEnd::default())
        .unwrap();
    s.arrive(&mut pol, "D1", "D", 4.0, 1).unwrap();
    s.pop(&mut pol, 4.0).unwrap();
    s.finish(&mut pol, "D1", 4.0, 1, TurnEnd::default())
        .unwrap();
    assert_eq!(s.dropped_idle_programs(), 2);
    assert!(s.end_program(&mut pol, "C").is_err());
    assert_eq!(s.end_program(&mut pol, "B").unwrap().turns, 2);
}

#[test]
fn a_program_idle_longer_than_max_ttl_returns_as_a_new_arrival() {
    let (mut s, mut pol) = setup(); // max_ttl_s 300
    let free = TurnEnd {
        tool: Some("t"),
        cache_miss_cost_s: Some(0.0), // never pinned: idle from its finish
        ..TurnEnd::default()
    };
    s.arrive(&mut pol, "a1", "A", 0.0, 10).unwrap();
    s.pop(&mut pol, 0.0).unwrap();
    s.finish(&mut pol, "a1", 1.0, 10, free).unwrap();
    s.arrive(&mut pol, "b1", "B", 2.0, 10).unwrap();
    // back within max_ttl_s of its finish: A keeps its place, ahead of B
    s.arrive(&mut pol, "a2", "A", 301.0, 10).unwrap();
    assert_eq!(s.priority("a2").unwrap().rank_s, 0.0);
    assert_eq!(s.pop(&mut pol, 301.0).unwrap().as_deref(), Some("a2"));
    s.finish(&mut pol, "a2", 302.0, 10, free).unwrap();
    // away 302 s > 300 s: it queues as a program arriving now, behind B
    s.arrive(&mut pol, "a3", "A", 604.0, 10).unwrap();
    let key = s.priority("a3").unwrap();
    assert_eq!((key.rank_s, key.program_order), (604.0, 2));
    assert_eq!(s.pop(&mut pol, 604.0).unwrap().as_deref(), Some("b1"));
    // its gap is still a sample of the tool's duration
    assert_eq!(pol.tool_count("", Some("t")), 2);
}

#[test]
fn the_tenant_is_read_from_a_namespaced_id_only() {
    let key = "0123456789abcdef0123456789abcdef";
    assert_eq!(pins::tenant_of(&format!("\0t:{key}:p")), key);
    assert_eq!(pins::tenant_of("p"), "");
    assert_eq!(pins::tenant_of(&format!("\0t:{key}")), "");
    assert_eq!(
        pins::tenant_of(&format!("\0t:{}:p", key.to_uppercase())),
        ""
    );
    assert_eq!(pins::tenant_of(&format!("\0t:{}:p", &key[1..])), "");
}

#[test]
fn a_tenant_under_its_share_displaces_the_latest_pins_of_the_one_over_it() {
    let (mut s, mut pol) = setup();
    let a = |i: usize| format!("\0t:{}:p{i}", "a".repeat(32));
    let b = format!("\0t:{}:p", "b".repeat(32));
    let mut turn = |s: &mut ProgramScheduler, pid: &str, rid: &str, blocks: i64| {
        s.arrive(&mut pol, rid, pid, 0.0, blocks).unwrap();
        s.pop(&mut pol, 0.0).unwrap();
        s.finish(&mut pol, rid, 0.0, blocks, pinning("bash"))
            .unwrap()
    };
    for i in 0..10 {
        assert!(turn(&mut s, &a(i), &format!("a{i}"), 10).pin.is_some());
    }
    assert!(turn(&mut s, &a(10), "a10", 10).pin.is_none()); // full, work-conserving only
    let fin = turn(&mut s, &b, "b", 15);
    assert!(fin.pin.is_some());
    let released: Vec<_> = fin
        .released
        .iter()
        .map(|p| p.program_id.to_string())
        .collect();
    assert_eq!(released, [a(9), a(8)]);
    assert_eq!(s.pinned_blocks(), 95);
}
