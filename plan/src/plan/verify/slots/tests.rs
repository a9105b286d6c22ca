use super::*;

/// Buffer `id` of `size` bytes, alignment 1.
fn b(id: u32, size: u64) -> (u32, u64, u64) {
    (id, size, 1)
}

#[test]
fn accepts_slots_reused_one_buffer_at_a_time_and_a_new_group_from_zero() {
    // One buffer placed before the cut is live, below the base 100.
    let mut c = SlotCheck::new(100, 1);
    c.alloc(b(1, 60), 128, 0, 64).unwrap();
    c.alloc(b(2, 10), 192, 1, 16).unwrap();
    c.free(1, Some(0)).unwrap();
    c.alloc(b(3, 64), 128, 0, 64).unwrap();
    c.free(0, None).unwrap();
    c.free(2, Some(1)).unwrap();
    c.free(3, Some(0)).unwrap();
    // Nothing is live: a new group numbers its slots from 0 again, from offset 0.
    c.alloc(b(4, 5), 0, 0, 8).unwrap();
    c.free(4, Some(0)).unwrap();
    c.finish().unwrap();
    assert_eq!(c.peak(), 202);
}

#[test]
fn rejects_a_slot_reused_while_its_buffer_lives() {
    let mut c = SlotCheck::new(0, 0);
    c.alloc(b(1, 60), 0, 0, 64).unwrap();
    assert_eq!(
        c.alloc(b(2, 4), 0, 0, 64),
        Err(Fault::Clash {
            a: (1, 0, 60),
            b: (2, 0, 4)
        })
    );
}

#[test]
fn rejects_slots_that_overlap_or_do_not_hold_their_buffer() {
    let certificate = |r: Result<(), Fault>| match r {
        Err(Fault::Certificate { why, .. }) => why,
        other => panic!("{other:?}"),
    };
    // A new slot inside the one before (its buffer would overlap buffer 1's bytes).
    let mut c = SlotCheck::new(0, 0);
    c.alloc(b(1, 60), 0, 0, 64).unwrap();
    assert!(certificate(c.alloc(b(2, 4), 32, 1, 32)).contains("below"));
    // Below the base, where buffers placed before the cut may live.
    let mut c = SlotCheck::new(100, 1);
    assert!(certificate(c.alloc(b(1, 4), 96, 0, 4)).contains("below"));
    // Larger than its slot, off its slot's start, in a slot never opened.
    let mut c = SlotCheck::new(0, 0);
    c.alloc(b(1, 8), 0, 0, 8).unwrap();
    c.alloc(b(9, 1), 8, 1, 8).unwrap();
    c.free(1, Some(0)).unwrap();
    assert!(certificate(c.alloc(b(2, 9), 0, 0, 8)).contains("within"));
    assert!(certificate(c.alloc(b(3, 4), 4, 0, 8)).contains("within"));
    assert!(certificate(c.alloc(b(4, 4), 64, 5, 8)).contains("never opened"));
    // Leaving a slot it is not in.
    let mut c = SlotCheck::new(0, 0);
    c.alloc(b(1, 8), 0, 0, 8).unwrap();
    assert!(certificate(c.free(2, Some(0))).contains("not in"));
}

#[test]
fn rejects_a_wrong_live_count_at_the_cut() {
    // Given 0 live where 1 is: the first free ends the group early, the last one has no buffer.
    let mut c = SlotCheck::new(0, 0);
    c.alloc(b(1, 8), 0, 0, 8).unwrap();
    c.free(1, Some(0)).unwrap();
    assert!(matches!(
        c.free(0, None),
        Err(Fault::Certificate {
            buffer: Some(0),
            ..
        })
    ));
    // Given 2 where 1 is: a buffer is left live at the end.
    let mut c = SlotCheck::new(0, 2);
    c.free(0, None).unwrap();
    assert!(matches!(
        c.finish(),
        Err(Fault::Certificate { buffer: None, .. })
    ));
}

#[test]
fn rejects_misaligned_and_overflowing_buffers() {
    let mut c = SlotCheck::new(0, 0);
    assert_eq!(c.alloc((1, 8, 16), 8, 0, 16), Err(Fault::Misaligned(1, 8)));
    let mut c = SlotCheck::new(0, 0);
    assert!(matches!(
        c.alloc(b(1, 8), u64::MAX - 4, 0, 8),
        Err(Fault::OutOfBounds { limit: None, .. })
    ));
}
