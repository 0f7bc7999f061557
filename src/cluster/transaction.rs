//! `Transaction`: MULTI/EXEC commands whose keys can only come from a `KeySet`.

use redis::ToRedisArgs;

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
            let cmd = pipe.cmd(command.name);
            for arg in &command.args {
                match arg {
                    TxArg::Key(index) => cmd.arg(&keys.keys()[*index]),
                    TxArg::Bytes(bytes) => cmd.arg(bytes),
                };
            }
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
        self.args
            .extend(arg.to_redis_args().into_iter().map(TxArg::Bytes));
        self
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
