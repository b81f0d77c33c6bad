//! TCP: [`listener`], [`stream`], and the owned halves of a stream
//! ([`split`]).

pub(crate) mod listener;
pub(crate) mod split;
pub(crate) mod stream;
