//! Unit tests of the Rust tree alone; the differential tests (tests/prefix/) hold it to the
//! Python reference.

use super::*;

fn tree(max_nodes: i64, ttl: f64) -> PrefixTree {
    PrefixTree::new(max_nodes, 2, 16, 1024, ttl).unwrap()
}

#[test]
fn insert_counts_held_prefix() {
    let mut t = tree(100, f64::INFINITY);
    assert_eq!(t.insert(&[1, 2, 3], 0.0).unwrap(), 0);
    assert_eq!(t.insert(&[1, 2, 4], 1.0).unwrap(), 2);
    assert_eq!(t.match_len(&[1, 2, 3, 9]), 3);
    assert_eq!(t.len(), 4);
}

#[test]
fn bound_evicts_least_recent_leaf_not_the_prefix() {
    let mut t = tree(5, 10.0);
    t.insert(&[1, 2, 3], 0.0).unwrap();
    t.insert(&[1, 2, 4], 1.0).unwrap();
    assert_eq!(t.insert(&[1, 2, 4, 5, 6, 7], 2.0).unwrap(), 3);
    assert_eq!(t.len(), 5);
    assert_eq!(t.match_len(&[1, 2, 3]), 2);
    assert_eq!(t.evicted_blocks(), 1);
}

#[test]
fn expiry_charges_until_the_deadline() {
    let mut t = tree(5, 10.0);
    t.insert(&[1, 2, 3], 0.0).unwrap();
    t.insert(&[1, 2, 4], 1.0).unwrap();
    t.insert(&[1, 2, 4, 5, 6, 7], 2.0).unwrap();
    assert_eq!(t.expire(12.5).unwrap(), 5);
    assert!(t.is_empty());
    // Blocks 1, 2 held 0..12; 3 held 0..2 (evicted); 4 held 1..12; 5, 6 held 2..12.
    assert_eq!(t.block_seconds(20.0).unwrap(), 57.0);
    assert!(t.groups().iter().all(|g| g.blocks == 0));
}

#[test]
fn refuses_time_going_back_and_bad_ttls() {
    let mut t = tree(5, 10.0);
    t.insert(&[1], 5.0).unwrap();
    assert!(t.insert(&[1], 4.0).is_err());
    assert!(t.set_group_ttls(&[(vec![1], f64::NAN)]).is_err());
    assert!(t.set_group_ttls(&[(vec![], 1.0)]).is_err());
    assert!(PrefixTree::new(0, 2, 16, 16, 1.0).is_err());
}
