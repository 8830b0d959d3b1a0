//! Text in and out of [`Generator`](super::Generator): a Hugging Face `tokenizer.json`, as the
//! `tokenizers` crate reads it, turning a prompt into token ids and new ids back into text.
//!
//! The crate is built without its C and C++ parts (`fancy-regex` rather than `onig` for the
//! pre-tokenizers' regexes), so the driver still builds with the Rust toolchain alone.
//!
//! A generator takes whole prompts and token ids of its model only. So a loaded tokenizer
//! neither truncates nor pads (settings a `tokenizer.json` may carry for training batches),
//! and [`Tokenizer::check_ids`] refuses ids beyond the model's vocabulary before anything
//! compiles, naming the file: a tokenizer of another model fails there, not as a panic or an
//! out-of-range embedding lookup later.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use einsum_core::fsio::{MAX_INPUT_FILE_BYTES, read_capped};

use crate::{Error, Result};

/// A `tokenizer.json`, loaded (see the [module docs](self)).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads the tokenizer in the `tokenizer.json` file at `path`.
    ///
    /// Errors: a file that cannot be read (missing, a directory, not UTF-8, over
    /// [`MAX_INPUT_FILE_BYTES`]) is [`Error::File`]; one the `tokenizers` crate does not read
    /// as a tokenizer (malformed JSON, an unknown model or pre-tokenizer) is
    /// [`Error::Tokenizer`]. Both name `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let json = read_capped(path, MAX_INPUT_FILE_BYTES)?;
        let mut inner = tokenizers::Tokenizer::from_str(&json).map_err(|e| tokenizer_error(path, e))?;
        inner.with_padding(None);
        inner.with_truncation(None).map_err(|e| tokenizer_error(path, e))?;
        Ok(Tokenizer { inner, path: path.to_path_buf() })
    }

    /// The file this tokenizer was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens the tokenizer knows, its added and special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// `text`'s token ids, with the special tokens the tokenizer's post-processor adds (a
    /// LLaMA tokenizer's beginning-of-sequence token), as the model was trained to see them.
    pub fn encode(&self, text: &str) -> Result<Vec<i32>> {
        let encoding = self.inner.encode(text, true).map_err(|e| tokenizer_error(&self.path, e))?;
        encoding
            .get_ids()
            .iter()
            .map(|&id| {
                i32::try_from(id).map_err(|_| Error::Tokenizer {
                    path: self.path.clone(),
                    message: format!("`{text}` encodes to token id {id}, beyond the ids a model takes (i32)"),
                })
            })
            .collect()
    }

    /// The text of `ids`, special tokens (beginning and end of sequence, padding) skipped.
    /// An id the tokenizer does not know adds nothing (a model's vocabulary is often padded
    /// beyond its tokenizer's); a negative id is an error.
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        let ids = ids
            .iter()
            .map(|&id| {
                u32::try_from(id).map_err(|_| Error::Tokenizer {
                    path: self.path.clone(),
                    message: format!("cannot decode the negative token id {id}"),
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        self.inner.decode(&ids, true).map_err(|e| tokenizer_error(&self.path, e))
    }

    /// Refuses `ids` (prompt `prompt`'s encoding) if one is outside a model's vocabulary of
    /// `vocab_size` tokens: the tokenizer is not the model's.
    pub fn check_ids(&self, prompt: usize, ids: &[i32], vocab_size: usize) -> Result<()> {
        match ids.iter().find(|&&id| id < 0 || id as usize >= vocab_size) {
            Some(id) => Err(Error::Tokenizer {
                path: self.path.clone(),
                message: format!(
                    "prompt {prompt} encodes to token id {id}, outside the model's vocabulary of {vocab_size} \
                     (its config.json's vocab_size): is this the model's tokenizer?"
                ),
            }),
            None => Ok(()),
        }
    }
}

/// The `tokenizers` crate's error `e` about the tokenizer of the file `path`.
fn tokenizer_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Tokenizer { path: path.to_path_buf(), message: e.to_string() }
}
