//! Parses arbitrary UTF-8 as ExProg. The parser must never panic; a program it accepts must
//! print to text that parses back to the same program (parse∘print is the identity), and the
//! static checks (through both `Program::check` and `load`, which locates errors) must not
//! panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let Ok(program) = einsum_exprog::parse(src) else { return };
    let printed = program.to_string();
    match einsum_exprog::parse(&printed) {
        Ok(reparsed) => {
            assert_eq!(reparsed, program, "parse∘print changed the program\nsource: {src:?}\nprinted: {printed:?}")
        }
        Err(e) => panic!("the printed program does not parse: {e}\nsource: {src:?}\nprinted: {printed:?}"),
    }
    let checked = program.check();
    let loaded = einsum_exprog::load(src);
    assert_eq!(checked.is_ok(), loaded.is_ok(), "check and load disagree on {src:?}");
});
