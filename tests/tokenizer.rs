//! `generate`'s tokenizer on the llama3 fixture's `tokenizer.json` of
//! `scripts/make_tokenizer_fixture.py`: encodings and decodings equal the Python `tokenizers`
//! library's (`tokenizer_reference.json`: ASCII, whitespace runs, non-ASCII text in and outside
//! the fixture's alphabet, an empty string); `generate --prompt TEXT` generates exactly what
//! `--prompt-tokens` with TEXT's ids does; a missing or malformed tokenizer, ids outside the
//! model's vocabulary and `--prompt` without a tokenizer are errors that name the file.

use std::path::{Path, PathBuf};
use std::process::Output;

use einsummable::Error;
use einsummable::generate::Tokenizer;
use serde_json::Value;

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("einsum-models/tests/fixtures").join(family)
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_file(fixture("llama3").join("tokenizer.json")).unwrap()
}

/// The Python library's `(text, ids, decoded)` for each reference string.
fn reference() -> Vec<(String, Vec<i32>, String)> {
    let json = std::fs::read_to_string(fixture("llama3").join("tokenizer_reference.json")).unwrap();
    let v: Value = serde_json::from_str(&json).unwrap();
    let cases = v["cases"].as_array().unwrap();
    cases
        .iter()
        .map(|c| {
            let ids = c["ids"].as_array().unwrap().iter().map(|i| i.as_i64().unwrap() as i32).collect();
            (c["text"].as_str().unwrap().to_owned(), ids, c["decoded"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn einsummable(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids_arg(ids: &[i32]) -> String {
    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// A file of `contents` in the temporary directory, unique to this process and `name`.
fn temporary(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("einsummable-tokenizer-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn encode_and_decode_equal_the_python_tokenizers_library() {
    let t = tokenizer();
    assert_eq!(t.vocab_size(), 128);
    let cases = reference();
    assert!(cases.len() >= 5 && cases.iter().any(|(text, ..)| !text.is_ascii()));
    for (text, ids, decoded) in &cases {
        assert_eq!(&t.encode(text).unwrap(), ids, "{text:?}");
        // The beginning-of-sequence token of the post-processor, and only it, comes first.
        assert_eq!(ids[0], 1, "{text:?}");
        assert_eq!(&t.decode(ids).unwrap(), decoded, "{text:?}");
    }
    // Within the alphabet, text survives the round trip, whitespace runs and accents included;
    // outside it (`<unk>`, skipped when decoding), it does not.
    for (text, _, decoded) in &cases[..4] {
        assert_eq!(decoded, text);
    }
    assert_ne!(cases[4].2, cases[4].0);
}

#[test]
fn a_missing_or_malformed_tokenizer_is_an_error_that_names_the_file() {
    let missing = fixture("llama3").join("no-such-tokenizer.json");
    let err = Tokenizer::from_file(&missing).unwrap_err();
    assert!(matches!(err, Error::File(_)), "{err:?}");
    assert!(err.to_string().contains("no-such-tokenizer.json"), "{err}");

    for (name, contents) in
        [("truncated.json", "{\"version\": \"1.0\", \"model\": {"), ("model.json", "{\"model\": 3}")]
    {
        let path = temporary(name, contents);
        let err = Tokenizer::from_file(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(&err, Error::Tokenizer { path: p, .. } if *p == path), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    }

    let t = tokenizer();
    let ids = t.encode("Hello, world!").unwrap();
    t.check_ids(0, &ids, 128).unwrap();
    let err = t.check_ids(3, &ids, 100).unwrap_err();
    assert!(matches!(err, Error::Tokenizer { .. }), "{err:?}");
    assert!(err.to_string().contains("prompt 3") && err.to_string().contains("vocabulary of 100"), "{err}");
    assert!(t.decode(&[1, -4]).unwrap_err().to_string().contains("-4"));
}

/// `--prompt TEXT` (a batch of two, through the fixture directory's own tokenizer.json) gives
/// exactly the new tokens of `--prompt-tokens` with the texts' ids, and their decoded text;
/// an explicit `--tokenizer` is the same tokenizer.
#[test]
fn generate_with_prompt_text_equals_generate_with_its_token_ids() {
    let dir = format!("hf:{}", fixture("llama3").display());
    let cases = reference();
    let (a, b) = (&cases[0], &cases[1]);
    let common = ["generate", &dir, "--devices", "2", "--max-new-tokens", "12", "--no-stop", "--json"];
    let with_text = json(&einsummable(&[&common[..], &["--prompt", &a.0, "--prompt", &b.0]].concat()));
    let with_ids = json(&einsummable(
        &[&common[..], &["--prompt-tokens", &ids_arg(&a.1), "--prompt-tokens", &ids_arg(&b.1)]].concat(),
    ));
    let tokens = |v: &Value| -> Vec<Vec<i32>> {
        let all = v["tokens"].as_array().unwrap();
        all.iter().map(|t| t.as_array().unwrap().iter().map(|i| i.as_i64().unwrap() as i32).collect()).collect()
    };
    assert_eq!(tokens(&with_text), tokens(&with_ids));
    assert!(tokens(&with_text).iter().all(|t| t.len() == 12));
    let t = tokenizer();
    let expected: Vec<String> = tokens(&with_text).iter().map(|ids| t.decode(ids).unwrap()).collect();
    assert_eq!(with_text["text"], serde_json::json!(expected));
    assert_eq!(with_ids["text"], with_text["text"]);
    assert!(with_text["tokenizer"].as_str().unwrap().ends_with("tokenizer.json"));

    let file = fixture("llama3").join("tokenizer.json");
    let file = file.to_str().unwrap();
    let out = einsummable(&[&common[..6], &["--no-stop", "--prompt", &a.0, "--tokenizer", file]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let first = &tokens(&with_text)[0];
    assert!(text.contains(&format!("prompt 0: 12 new tokens: {}", ids_arg(first))), "{text}");
    assert!(text.contains(&format!("prompt 0: new text: {:?}", expected[0])), "{text}");

    // Without a tokenizer (qwen2's directory has none), no text is reported.
    let qwen2 = format!("hf:{}", fixture("qwen2").display());
    let v = json(&einsummable(&[
        "generate",
        &qwen2,
        "--prompt-tokens",
        "1,2,3",
        "--devices",
        "2",
        "--max-new-tokens",
        "2",
        "--json",
    ]));
    assert!(v.get("text").is_none() && v.get("tokenizer").is_none(), "{v}");
}

/// Each refusal exits non-zero without a panic and says why, naming the file concerned.
#[test]
fn generate_refuses_prompt_text_without_a_working_tokenizer() {
    let llama3 = format!("hf:{}", fixture("llama3").display());
    let qwen2 = format!("hf:{}", fixture("qwen2").display());
    let looked_for = fixture("qwen2").join("tokenizer.json").display().to_string();
    let missing = fixture("llama3").join("missing-tokenizer.json").display().to_string();
    let malformed = temporary("malformed.json", "{\"model\": [1, 2");
    let malformed_name = malformed.display().to_string();
    // A tokenizer whose ids do not fit the model: llama3's, its post-processor's `<s>`
    // renumbered beyond the vocabulary of 128.
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama3").join("tokenizer.json")).unwrap()).unwrap();
    v["post_processor"]["special_tokens"]["<s>"]["ids"] = serde_json::json!([200]);
    let big = temporary("big.json", &v.to_string());
    let big_name = big.display().to_string();
    for (args, why) in [
        (vec!["generate", &qwen2, "--prompt", "Hello"], vec!["--prompt needs a tokenizer", &looked_for]),
        (vec!["generate", &llama3, "--prompt", "Hello", "--tokenizer", &missing], vec![&missing]),
        (vec!["generate", &llama3, "--prompt-tokens", "1,2", "--tokenizer", &missing], vec![&missing]),
        (vec!["generate", &llama3, "--prompt", "Hello", "--tokenizer", &malformed_name], vec![&malformed_name]),
        (
            vec!["generate", &llama3, "--prompt", "Hello", "--tokenizer", &big_name],
            vec![&big_name, "vocabulary of 128"],
        ),
        (vec!["generate", &llama3, "--prompt", "Hello", "--prompt-tokens", "1,2"], vec!["--prompt"]),
        (vec!["generate", &llama3], vec!["--prompt"]),
    ] {
        let out = einsummable(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !stderr.contains("panicked"), "{args:?}: {stderr}");
        for w in why {
            assert!(stderr.contains(w), "{args:?}: {stderr} lacks {w}");
        }
    }
    std::fs::remove_file(malformed).unwrap();
    std::fs::remove_file(big).unwrap();
}
