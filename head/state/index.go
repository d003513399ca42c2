package state

import (
	"encoding/binary"
	"fmt"

	"github.com/megaflow/megaflow/internal/wire"
)

// Index keys. Every string in a key ends with a 0 byte, as in memdb's
// StringFieldIndex, so that one key is never a prefix of another. memdb
// appends the row's id key to the keys of non-unique indexes; the key
// functions reserve room for it so that append does not copy.

// rawKey is an index key already encoded (a page token's position). Every
// indexer here returns it unchanged from FromArgs so that LowerBound can
// start exactly there.
type rawKey []byte

// funcIndexer is a memdb SingleIndexer, Indexer and PrefixIndexer built from
// functions, without reflection (restoring a million rows is on the clock).
type funcIndexer struct {
	// object returns the row's key, without the id suffix of non-unique
	// indexes; ok false leaves the row out of the index.
	object func(obj any) (key []byte, ok bool)
	// args builds the key (or key prefix, for Get) from lookup arguments.
	args func(args []any) ([]byte, bool)
	// prefix builds a prefix for "<index>_prefix" lookups; nil: unsupported.
	prefix func(args []any) ([]byte, bool)
}

// FromObject implements memdb.SingleIndexer.
func (f *funcIndexer) FromObject(obj any) (bool, []byte, error) {
	k, ok := f.object(obj)
	return ok, k, nil
}

// FromArgs implements memdb.Indexer; a single rawKey argument is returned
// as is.
func (f *funcIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) == 1 {
		if k, ok := args[0].(rawKey); ok {
			return k, nil
		}
	}
	k, ok := f.args(args)
	if !ok {
		return nil, fmt.Errorf("unexpected index arguments %#v", args)
	}
	return k, nil
}

// PrefixFromArgs implements memdb.PrefixIndexer.
func (f *funcIndexer) PrefixFromArgs(args ...any) ([]byte, error) {
	if f.prefix == nil {
		return nil, fmt.Errorf("index does not support prefix lookups")
	}
	k, ok := f.prefix(args)
	if !ok {
		return nil, fmt.Errorf("unexpected prefix arguments %#v", args)
	}
	return k, nil
}

// stringKey returns s followed by a 0 byte, with extra bytes of spare
// capacity.
func stringKey(s string, extra int) []byte {
	b := make([]byte, 0, len(s)+1+extra)
	b = append(b, s...)
	return append(b, 0)
}

// oneString decodes the arguments of a lookup by one string.
func oneString(args []any) (string, bool) {
	if len(args) != 1 {
		return "", false
	}
	s, ok := args[0].(string)
	return s, ok
}

func stringArgs(args []any) ([]byte, bool) {
	s, ok := oneString(args)
	if !ok {
		return nil, false
	}
	return stringKey(s, 0), true
}

func stringPrefixArgs(args []any) ([]byte, bool) {
	s, ok := oneString(args)
	return []byte(s), ok
}

// taskStateKey orders tasks by state; QUEUED tasks then by queue (the
// spec's type), priority (highest first) and queue_seq (oldest first): the
// scheduler's order. Other states fall back to the id memdb appends.
func taskStateKey(t *Task, extra int) []byte {
	if t.State != queued {
		b := make([]byte, 1, 1+extra)
		b[0] = byte(t.State)
		return b
	}
	q := t.Queue()
	b := make([]byte, 0, 1+len(q)+1+4+8+extra)
	b = append(b, byte(t.State))
	b = append(b, q...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, ^(uint32(t.Priority) ^ 1<<31))
	return binary.BigEndian.AppendUint64(b, t.QueueSeq)
}

// taskStateArgs accepts (wire.TaskState) or (wire.TaskState, queue string).
func taskStateArgs(args []any) ([]byte, bool) {
	if len(args) < 1 || len(args) > 2 {
		return nil, false
	}
	s, ok := args[0].(wire.TaskState)
	if !ok {
		return nil, false
	}
	b := []byte{byte(s)}
	if len(args) == 2 {
		q, ok := args[1].(string)
		if !ok {
			return nil, false
		}
		b = append(append(b, q...), 0)
	}
	return b, true
}

func graphStateArgs(args []any) ([]byte, bool) {
	if len(args) != 1 {
		return nil, false
	}
	s, ok := args[0].(wire.GraphState)
	return []byte{byte(s)}, ok
}

func workerStatusArgs(args []any) ([]byte, bool) {
	if len(args) != 1 {
		return nil, false
	}
	s, ok := args[0].(wire.WorkerStatus)
	return []byte{byte(s)}, ok
}

// stagedKey is the graph id, a 0 byte and the chunk number big-endian.
func stagedKey(graphID string, chunk uint32) []byte {
	b := stringKey(graphID, 4)
	return binary.BigEndian.AppendUint32(b, chunk)
}

// stagedArgs accepts (graph id) for all chunks of a graph or (graph id,
// chunk) for one.
func stagedArgs(args []any) ([]byte, bool) {
	if len(args) < 1 || len(args) > 2 {
		return nil, false
	}
	id, ok := args[0].(string)
	if !ok {
		return nil, false
	}
	if len(args) == 1 {
		return stringKey(id, 0), true
	}
	c, ok := args[1].(uint32)
	if !ok {
		return nil, false
	}
	return stagedKey(id, c), true
}
