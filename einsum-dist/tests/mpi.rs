//! The MPI transport between real processes. Each test, run by the test harness, launches
//! itself under `mpirun` (`EINSUM_DIST_RANK_TEST` set) and checks the job's exit; run so, its
//! body is one rank. Needs Open MPI (`mpirun` on the path): the `mpi` feature is only for
//! machines that have it, so a missing `mpirun` fails the test rather than skipping it.
#![cfg(feature = "mpi")]

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use einsum_core::{DType, HostTensor, TensorType};
use einsum_dist::{Envelope, MpiTransport, Transport, TransportError};

const CHILD: &str = "EINSUM_DIST_RANK_TEST";

/// In the harness: runs test `name` as a job of `ranks` ranks and asserts it succeeds.
/// Under mpirun: returns true, and the caller runs the rank's body.
fn as_rank(name: &str, ranks: usize) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new("mpirun")
        .args(["-np", &ranks.to_string(), "--oversubscribe", "-x", &format!("{CHILD}=1")])
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs: the `mpi` feature's tests need Open MPI (apt-get install libopenmpi-dev openmpi-bin)");
    let start = Instant::now();
    while child.try_wait().expect("waitable").is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("mpirun ended");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name} over {ranks} ranks failed:\n{text}");
    // Every rank ran the body: the harness says so once per rank.
    assert_eq!(text.matches("1 passed").count(), ranks, "{text}");
    false
}

/// The blocks rank `from` sends rank `to`: one per dtype and shape, tag by tag, the seed
/// derived from (from, to, tag) so that the receiver can regenerate them.
fn blocks(from: usize, to: usize) -> Vec<(u32, HostTensor)> {
    let shapes: [&[usize]; 4] = [&[3], &[4, 5], &[2, 3, 4], &[0]];
    let mut out = Vec::new();
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        for (j, shape) in shapes.iter().enumerate() {
            let tag = (i * shapes.len() + j) as u32 + 1;
            let seed = (from * 1000 + to * 100) as u64 + u64::from(tag);
            let ty = TensorType::zero_bounded(shape);
            let block = if dtype == DType::I32 {
                HostTensor::random_indices(ty, 1000, seed)
            } else {
                HostTensor::random(ty, dtype, seed)
            };
            out.push((tag, block));
        }
    }
    out
}

/// Receives `n` messages (each within 30 s), shaped by `shape`.
fn receive_all(t: &MpiTransport, n: usize, shape: einsum_dist::Shape<'_>) -> Vec<(Envelope, HostTensor)> {
    (0..n)
        .map(|i| {
            t.receive(Duration::from_secs(30), shape).expect("received").unwrap_or_else(|| panic!("message {i} late"))
        })
        .collect()
}

/// Every rank sends every other rank blocks of every dtype (an empty one too), a strided
/// view and a 64 MB block; each receives exactly those, bit for bit.
fn exchange() {
    let t = MpiTransport::init().expect("MPI");
    let (me, ranks) = (t.rank(), t.ranks());
    let big = TensorType::zero_bounded(&[16 << 20]);
    let view_of = TensorType::zero_bounded(&[6, 8]);
    let view = TensorType::new(&[1, 2], &[5, 6]).expect("a box");
    for to in (0..ranks).filter(|&r| r != me) {
        for (tag, b) in blocks(me, to) {
            t.send(to, tag, b).expect("sent");
        }
        let whole = HostTensor::random(view_of.clone(), DType::F32, (me * 10 + to) as u64);
        t.send(to, 100, whole.view(&view).expect("a view")).expect("sent");
        t.send(to, 101, HostTensor::random(big.clone(), DType::F32, (me * 10 + to) as u64)).expect("sent");
    }
    let per_rank = blocks(0, 1).len() + 2;
    let shape = |e: &Envelope| {
        Ok(match e.tag {
            100 => (view.clone(), DType::F32),
            101 => (big.clone(), DType::F32),
            tag => {
                let b = &blocks(e.from, me)[tag as usize - 1].1;
                (b.ty().clone(), b.dtype())
            }
        })
    };
    let got = receive_all(&t, per_rank * (ranks - 1), &shape);
    for (e, block) in got {
        let want = match e.tag {
            100 => HostTensor::random(view_of.clone(), DType::F32, (e.from * 10 + me) as u64).slice(&view).unwrap(),
            101 => HostTensor::random(big.clone(), DType::F32, (e.from * 10 + me) as u64),
            tag => blocks(e.from, me)[tag as usize - 1].1.clone(),
        };
        assert_eq!(e.bytes, want.size_bytes());
        assert!(block.to_ne_bytes() == want.to_ne_bytes(), "rank {me}: tag {} from {} differs", e.tag, e.from);
    }
    t.flush(Duration::from_secs(30)).expect("delivered");
}

#[test]
fn every_rank_receives_what_the_others_sent_over_two_ranks() {
    if as_rank("every_rank_receives_what_the_others_sent_over_two_ranks", 2) {
        exchange();
    }
}

#[test]
fn every_rank_receives_what_the_others_sent_over_four_ranks() {
    if as_rank("every_rank_receives_what_the_others_sent_over_four_ranks", 4) {
        exchange();
    }
}

/// With 1000-byte messages, blocks of 16396 bytes (17 chunks), 4000 bytes (exactly 4) and
/// 1000 bytes (one message, no head) arrive whole, with their whole length in the envelope
/// the receiver shapes them from, in the order sent (blocks of one tag, and one of another
/// tag between them).
#[test]
fn a_block_over_the_chunk_size_goes_in_chunks() {
    if !as_rank("a_block_over_the_chunk_size_goes_in_chunks", 2) {
        return;
    }
    let t = MpiTransport::with_chunk_bytes(1000).expect("MPI");
    let ty = |n: usize| TensorType::zero_bounded(&[n]);
    let sent = [
        (7, HostTensor::random(ty(10), DType::F32, 1)),
        (7, HostTensor::random(ty(4099), DType::F32, 2)),
        (8, HostTensor::random(ty(3), DType::F32, 3)),
        (7, HostTensor::random(ty(2000), DType::F16, 4)),
        (7, HostTensor::random(ty(250), DType::F32, 5)),
        (7, HostTensor::random(ty(4099), DType::F32, 6)),
    ];
    if t.rank() == 0 {
        for (tag, b) in &sent {
            t.send(1, *tag, b.clone()).expect("sent");
        }
        t.flush(Duration::from_secs(30)).expect("delivered");
        return;
    }
    // Any-tag receives see one sender's messages in the order sent, heads of chunked
    // blocks among them.
    for (tag, want) in &sent {
        let shape = |e: &Envelope| {
            assert_eq!((e.from, e.tag, e.bytes), (0, *tag, want.size_bytes()));
            Ok((want.ty().clone(), want.dtype()))
        };
        let (e, got) = t.receive(Duration::from_secs(30), &shape).expect("received").expect("in time");
        assert_eq!((e.from, e.tag, e.bytes), (0, *tag, want.size_bytes()));
        assert_eq!(&got, want, "tag {tag}");
    }
    assert_eq!(t.receive(Duration::from_millis(200), &|_: &Envelope| unreachable!()).expect("nothing left"), None);
}

/// A message whose length does not fit the receiver's shape is refused naming its sender,
/// tag and length, and drained, whether it is one message or a chunked block (its whole
/// length, though each chunk would fit); a tag above the transport's bound is refused on
/// sending.
#[test]
fn misfits_and_tags_out_of_bound_are_typed_errors() {
    if !as_rank("misfits_and_tags_out_of_bound_are_typed_errors", 2) {
        return;
    }
    let t = MpiTransport::with_chunk_bytes(8).expect("MPI");
    assert!(t.tag_bound() >= 32766);
    let over =
        t.send(1 - t.rank(), t.tag_bound() + 1, HostTensor::filled(TensorType::zero_bounded(&[1]), DType::F32, 1.0));
    assert!(matches!(&over, Err(TransportError::Library { reason, .. }) if reason.contains("largest tag")), "{over:?}");
    if t.rank() == 0 {
        for (tag, n) in [(5, 1), (9, 10), (6, 2)] {
            t.send(1, tag, HostTensor::random(TensorType::zero_bounded(&[n]), DType::F32, 1)).expect("sent");
        }
        t.flush(Duration::from_secs(30)).expect("delivered");
        return;
    }
    let two = |_: &Envelope| Ok((TensorType::zero_bounded(&[2]), DType::F32));
    let e = t.receive(Duration::from_secs(30), &two).expect_err("4 bytes, not 8");
    assert!(matches!(e, TransportError::Unexpected { envelope: Envelope { from: 0, tag: 5, bytes: 4 }, .. }), "{e}");
    assert!(e.to_string().contains("expected 8 bytes"), "{e}");
    let e = t.receive(Duration::from_secs(30), &two).expect_err("40 bytes in chunks of 8, not 8");
    assert!(matches!(e, TransportError::Unexpected { envelope: Envelope { from: 0, tag: 9, bytes: 40 }, .. }), "{e}");
    // The misfits were drained: the next message is the one that fits.
    let (e, _) = t.receive(Duration::from_secs(30), &two).expect("received").expect("in time");
    assert_eq!(e.tag, 6);
    assert_eq!(t.receive(Duration::from_millis(200), &two).expect("nothing left"), None);
}
