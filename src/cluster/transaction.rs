//! `Transaction`: MULTI/EXEC commands whose keys can only come from a `KeySet`.

use redis::{RedisWrite, ToRedisArgs};

use crate::error::{Error, Result};
use crate::keys::KeySet;

/// Commands run atomically in one MULTI/EXEC on the slot of a [`KeySet`].
///
/// Commands name their keys by **index into the key set**, never as bytes, so
/// a transaction cannot touch a key outside its slot. Use a transaction when
/// the writes are unconditional (e.g. `INCRBY` + `PEXPIRE`); when a write
/// depends on a read, use a script with [`Cluster::eval`](crate::Cluster::eval).
///
/// ```
/// use shardlimit::cluster::{Transaction, TxCommand};
/// let tx = Transaction::new()
///     .command(TxCommand::new("INCRBY").key(0).arg(5))
///     .command(TxCommand::new("PEXPIRE").key(0).arg(60_000));
/// assert_eq!(tx.len(), 2);
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Transaction {
    commands: Vec<TxCommand>,
}

/// One command of a [`Transaction`].
#[derive(Clone, Debug)]
#[must_use]
pub struct TxCommand {
    name: &'static str,
    args: Vec<TxArg>,
}

#[derive(Clone, Debug)]
enum TxArg {
    Key(usize),
    Bytes(Vec<u8>),
}

impl Transaction {
    /// An empty transaction.
    pub fn new() -> Self {
        Transaction::default()
    }

    /// Appends a command.
    pub fn command(mut self, command: TxCommand) -> Self {
        self.commands.push(command);
        self
    }

    /// Number of commands.
    #[must_use]
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether there are no commands.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Checks every key index against `keys`.
    pub(crate) fn validate(&self, keys: &KeySet) -> Result<()> {
        for arg in self.commands.iter().flat_map(|c| &c.args) {
            if let TxArg::Key(index) = *arg
                && index >= keys.len()
            {
                return Err(Error::KeyIndex {
                    index,
                    len: keys.len(),
                });
            }
        }
        Ok(())
    }

    /// Appends the commands with their keys filled in (no `MULTI`/`EXEC`).
    /// Call [`Transaction::validate`] first.
    pub(crate) fn write_commands(&self, keys: &KeySet, pipe: &mut redis::Pipeline) {
        for command in &self.commands {
            let arg = |arg| bytes(keys, arg);
            // Sized once: a check writes a few commands per call, and a
            // command grown argument by argument reallocates each time.
            let size =
                command.name.len() + command.args.iter().map(|a| arg(a).len()).sum::<usize>();
            let mut cmd = redis::Cmd::with_capacity(1 + command.args.len(), size);
            cmd.arg(command.name);
            for a in &command.args {
                cmd.arg(arg(a));
            }
            pipe.add_command(cmd);
        }
    }
}

impl TxCommand {
    /// A command, e.g. `"INCRBY"`.
    pub fn new(name: &'static str) -> Self {
        TxCommand {
            name,
            args: Vec::new(),
        }
    }

    /// Appends key number `index` of the transaction's key set.
    pub fn key(mut self, index: usize) -> Self {
        self.args.push(TxArg::Key(index));
        self
    }

    /// Appends a plain argument (not a key).
    pub fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        arg.write_redis_args(&mut Collect(&mut self.args));
        self
    }
}

/// An argument's bytes: a key's of `keys`, or its own.
fn bytes<'a>(keys: &'a KeySet, arg: &'a TxArg) -> &'a [u8] {
    match arg {
        TxArg::Key(index) => &keys.keys()[*index],
        TxArg::Bytes(bytes) => bytes,
    }
}

/// Writes a value's arguments straight into a command's (`to_redis_args`
/// would collect them in a vector first).
struct Collect<'a>(&'a mut Vec<TxArg>);

impl RedisWrite for Collect<'_> {
    fn write_arg(&mut self, arg: &[u8]) {
        self.0.push(TxArg::Bytes(arg.to_vec()));
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        self.0.push(TxArg::Bytes(Vec::new()));
        LastArg(self.0)
    }
}

/// Appends to the last argument of a command.
struct LastArg<'a>(&'a mut Vec<TxArg>);

impl std::io::Write for LastArg<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(TxArg::Bytes(bytes)) = self.0.last_mut() {
            bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_indexes_are_checked_against_the_key_set() {
        let keys = KeySet::from_keys(["{a}:1"]).unwrap();
        let ok = Transaction::new().command(TxCommand::new("GET").key(0));
        ok.validate(&keys).unwrap();
        let bad = ok.command(TxCommand::new("GET").key(1));
        assert!(matches!(
            bad.validate(&keys),
            Err(Error::KeyIndex { index: 1, len: 1 })
        ));
    }

    #[test]
    fn arguments_are_those_redis_would_send() {
        let keys = KeySet::from_keys(["{a}:1"]).unwrap();
        let tx = Transaction::new().command(
            TxCommand::new("SET")
                .key(0)
                .arg(-12_i64)
                .arg(("NX", 3.5_f64))
                .arg(&[b"x".to_vec(), Vec::new()][..]),
        );
        let mut ours = redis::pipe();
        tx.write_commands(&keys, &mut ours);
        let mut theirs = redis::pipe();
        theirs
            .cmd("SET")
            .arg("{a}:1")
            .arg(-12_i64)
            .arg(("NX", 3.5_f64))
            .arg(&[b"x".to_vec(), Vec::new()][..]);
        assert_eq!(ours.get_packed_pipeline(), theirs.get_packed_pipeline());
    }

    #[test]
    fn writes_commands_with_keys_filled_in() {
        let keys = KeySet::from_keys(["{a}:1"]).unwrap();
        let tx = Transaction::new().command(TxCommand::new("INCRBY").key(0).arg(5));
        let mut pipe = redis::pipe();
        pipe.atomic();
        tx.write_commands(&keys, &mut pipe);
        let packed = String::from_utf8(pipe.get_packed_pipeline()).unwrap();
        assert_eq!(
            packed,
            "*1\r\n$5\r\nMULTI\r\n*3\r\n$6\r\nINCRBY\r\n$5\r\n{a}:1\r\n$1\r\n5\r\n*1\r\n$4\r\nEXEC\r\n"
        );
    }
}
