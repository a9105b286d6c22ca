use super::*;

#[test]
fn a_wait_counts_from_the_previous_batchs_end_to_its_start() {
    let mut clock = StallClock::new(Timestamps::new(64, 2.0).unwrap());
    clock.add_stall(None, Some(100));
    clock.add_stall(Some(150), Some(400));
    assert_eq!(
        clock.stalled(),
        Duration::from_nanos(100),
        "50 ticks of 2 ns"
    );
    // A batch that did not wait adds nothing, and moves the reference end.
    clock.add_stall(None, Some(1_000));
    clock.add_stall(Some(1_010), Some(1_020));
    assert_eq!(clock.stalled(), Duration::from_nanos(120));
}

#[test]
fn a_first_wait_or_a_lost_query_counts_nothing() {
    let mut clock = StallClock::new(Timestamps::new(64, 1.0).unwrap());
    clock.add_stall(Some(500), Some(600));
    assert_eq!(clock.stalled(), Duration::ZERO, "no compute work before it");
    clock.add_stall(None, None);
    clock.add_stall(Some(900), Some(950));
    assert_eq!(
        clock.stalled(),
        Duration::ZERO,
        "the previous end is unknown"
    );
}

#[test]
fn ticks_wrap_at_the_valid_bits() {
    let t = Timestamps::new(8, 1.0).unwrap();
    assert_eq!(t.between(250, 4), 10, "wrapped past 255");
    assert_eq!(t.between(10, 5), 0, "earlier: not a wait");
    assert!(Timestamps::new(0, 1.0).is_none(), "no timestamps");
    assert!(Timestamps::new(64, 0.0).is_none());
}
