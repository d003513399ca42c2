package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/wire"
	"google.golang.org/protobuf/proto"
)

// The snapshot format: the magic string, then records. A record is a kind
// byte, the payload's length as a uvarint, and the payload:
//
//	recMeta    uvarint last applied index, uvarint next queue_seq, then
//	           (optional: absent in snapshots from before cluster ids, and
//	           ignored by heads from before them) uvarint cluster id,
//	           then (optional likewise) uvarint rules version
//	recGraph   wire.Graph
//	recTask    wire.Task
//	recStaged  wire.SubmitGraphCommand (one staged chunk)
//	recWorker  wire.Worker
//	recQuota   wire.Quota (a tenant's quota, or the cluster limit)
//	recPool    wire.PoolTarget (a pre-warm target)
//	recSnapshot wire.Snapshot (a sandbox snapshot; rules 3)
//	recAdmission wire.AdmissionPolicy (an admission policy; rules 5)
//	recArchive wire.Graph (an archived graph's summary; rules 5)
//	recToken   wire.Token (an API token's row or the bootstrap marker;
//	           rules 6)
//	recEnd     uvarint number of records before it
//
// in that order: meta, graphs and tasks by id, staged chunks, workers by
// id, quotas by tenant, pre-warm targets by image and tenant, snapshots by
// id, admission policies by tenant (the cluster row first), archived summaries by id, tokens by
// accessor (the bootstrap marker first), end. A
// worker's GPUs in use are not written: the restore derives them from the
// tasks' active attempts and checks the workers' accounting
// against those attempts (state.Restore.Finish). Snapshots written before
// workers existed have no worker records and read the same. The end
// record makes a truncated snapshot an error rather than a smaller table.
// Records are marshalled deterministically, so equal tables give equal
// snapshots byte for byte.
const snapshotMagic = "megaflow-snapshot-v1\n"

// snapshotMagicRules is the header of a snapshot of a table under a rules
// version above 0: the same records, but a header that builds from before
// rules versions refuse ("not a megaflow snapshot"), so that such a head
// never installs the table and applies the entries after it under rules 0.
const snapshotMagicRules = "megaflow-snapshot-v2\n"

const (
	recMeta   byte = 1
	recGraph  byte = 2
	recTask   byte = 3
	recStaged byte = 4
	recWorker byte = 5
	recQuota  byte = 6
	recPool   byte = 15 // the scheduling branch's number, clear of the others'
	// recSnapshot is the sandbox branch's number, as its op (20).
	recSnapshot byte = 20
	// recAdmission is the admission branch's number, as its op (24).
	recAdmission byte = 24
	// recArchive is the archive branch's number, as its op (25).
	recArchive byte = 25
	// recToken is the token branch's number, as its first op (26).
	recToken byte = 26
	recEnd   byte = 0xff
)

const (
	// maxRecord bounds one record (a staged chunk is the largest: at most
	// a Raft entry).
	maxRecord = 256 << 20
	// batchRows is how many rows one job of the snapshot pipelines holds.
	batchRows = 1024
)

var marshalOpts = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}

// bufPool recycles the buffers of the snapshot pipelines (about a megabyte
// each), so that writing or reading a large table makes little garbage.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 1<<20)
	return &b
}}

// WriteSnapshot writes every row of v to w. Rows are marshalled by one
// goroutine per CPU and written in order. The snapshot goroutine calls it
// through Persist; tests call it to compare tables.
func WriteSnapshot(w io.Writer, v *state.View) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	if v.Rules() > 0 {
		bw.WriteString(snapshotMagicRules)
	} else {
		bw.WriteString(snapshotMagic)
	}
	meta := binary.AppendUvarint(nil, v.Index())
	meta = binary.AppendUvarint(meta, v.NextQueueSeq())
	meta = binary.AppendUvarint(meta, v.ClusterID())
	meta = binary.AppendUvarint(meta, v.Rules())
	bw.Write(appendRecord(nil, recMeta, meta))
	count := uint64(1)

	produce := func(send func([]any) bool) error {
		batch := make([]any, 0, batchRows)
		add := func(row any) bool {
			batch = append(batch, row)
			if len(batch) < batchRows {
				return true
			}
			ok := send(batch)
			batch = make([]any, 0, batchRows)
			return ok
		}
		for g := range v.Graphs() {
			if !add(g) {
				return nil
			}
		}
		for t := range v.Tasks() {
			if !add(t) {
				return nil
			}
		}
		for c := range v.StagedChunks() {
			if !add(c) {
				return nil
			}
		}
		for _, w := range v.Workers() {
			if !add(w) {
				return nil
			}
		}
		for _, q := range v.QuotaRows() {
			if !add(q) {
				return nil
			}
		}
		for _, p := range v.PoolTargets() {
			if !add(p) {
				return nil
			}
		}
		for _, s := range v.Snapshots("") {
			if !add(s) {
				return nil
			}
		}
		for _, p := range v.AdmissionPolicies() {
			if !add(&state.AdmissionPolicy{P: p}) {
				return nil
			}
		}
		for g := range v.ArchivedGraphs() {
			if !add(g) {
				return nil
			}
		}
		for _, t := range v.TokenRows() {
			if !add(t) {
				return nil
			}
		}
		if len(batch) > 0 {
			send(batch)
		}
		return nil
	}
	type encoded struct {
		buf  *[]byte // from bufPool
		rows int
	}
	work := func(rows []any) (encoded, error) {
		bp := bufPool.Get().(*[]byte)
		buf := (*bp)[:0]
		var (
			wt  wire.Task
			err error
		)
		for _, row := range rows {
			switch r := row.(type) {
			case *state.Graph:
				buf, err = appendMessage(buf, recGraph, r.ToWire())
			case *state.Task:
				wt.Reset()
				r.FillWire(&wt)
				buf, err = appendMessage(buf, recTask, &wt)
			case *state.StagedChunk:
				buf, err = appendMessage(buf, recStaged, r.Command)
			case *state.Worker:
				buf, err = appendMessage(buf, recWorker, r.ToWire())
			case *state.Quota:
				buf, err = appendMessage(buf, recQuota, r.ToWire())
			case *wire.PoolTarget:
				buf, err = appendMessage(buf, recPool, r)
			case *wire.Snapshot:
				buf, err = appendMessage(buf, recSnapshot, r)
			case *state.AdmissionPolicy:
				buf, err = appendMessage(buf, recAdmission, r.P)
			case *wire.Graph: // an archived summary
				buf, err = appendMessage(buf, recArchive, r)
			case *wire.Token:
				buf, err = appendMessage(buf, recToken, r)
			}
			if err != nil {
				return encoded{}, err
			}
		}
		*bp = buf
		return encoded{bp, len(rows)}, nil
	}
	consume := func(e encoded) error {
		count += uint64(e.rows)
		_, err := bw.Write(*e.buf)
		bufPool.Put(e.buf)
		return err
	}
	if err := runOrdered(runtime.GOMAXPROCS(0), produce, work, consume); err != nil {
		return err
	}
	bw.Write(appendRecord(nil, recEnd, binary.AppendUvarint(nil, count)))
	return bw.Flush() // reports any earlier write error too
}

func appendRecord(buf []byte, kind byte, payload []byte) []byte {
	buf = append(buf, kind)
	buf = binary.AppendUvarint(buf, uint64(len(payload)))
	return append(buf, payload...)
}

func appendMessage(buf []byte, kind byte, m proto.Message) ([]byte, error) {
	buf = append(buf, kind)
	buf = binary.AppendUvarint(buf, uint64(marshalOpts.Size(m)))
	return marshalOpts.MarshalAppend(buf, m)
}

// rawBatch is a run of undecoded records; the payload of record i is
// data[ends[i-1]:ends[i]].
type rawBatch struct {
	first uint64 // number of the first record in the snapshot
	kinds []byte
	ends  []int
	data  *[]byte // from bufPool, returned once decoded
}

// Rows decoded from a rawBatch besides graphs, tasks and staged chunks.
type (
	metaRow struct{ index, nextQueueSeq, clusterID, rules uint64 }
	endRow  struct{ count uint64 }
	// archivedRow is an archived graph's summary.
	archivedRow struct{ g *wire.Graph }
)

// ReadSnapshot reads a snapshot written by WriteSnapshot into r, finishes it
// (state.Restore.Finish: a snapshot whose workers disagree with its tasks is
// an error) and returns the index it was taken at. It does not commit r. Records are decoded by
// one goroutine per CPU and inserted in order on the calling goroutine. The
// FSM goroutine calls it through Restore.
func ReadSnapshot(rd io.Reader, r *state.Restore) (uint64, error) {
	br := bufio.NewReaderSize(rd, 1<<20)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || (string(magic) != snapshotMagic && string(magic) != snapshotMagicRules) {
		return 0, fmt.Errorf("not a megaflow snapshot (or an unknown version): header %q", magic)
	}
	newBatch := func(first uint64) *rawBatch {
		bp := bufPool.Get().(*[]byte)
		*bp = (*bp)[:0]
		return &rawBatch{first: first, data: bp}
	}
	produce := func(send func(*rawBatch) bool) error {
		b := newBatch(0)
		for n := uint64(0); ; n++ {
			kind, err := br.ReadByte()
			if err != nil {
				return fmt.Errorf("record %d: %w", n, unexpectedEOF(err))
			}
			size, err := binary.ReadUvarint(br)
			if err != nil {
				return fmt.Errorf("record %d: %w", n, unexpectedEOF(err))
			}
			if size > maxRecord {
				return fmt.Errorf("record %d: %d bytes, more than %d", n, size, maxRecord)
			}
			data := *b.data
			start := len(data)
			data = append(data, make([]byte, size)...)
			*b.data = data
			if _, err := io.ReadFull(br, data[start:]); err != nil {
				return fmt.Errorf("record %d: %w", n, unexpectedEOF(err))
			}
			b.kinds = append(b.kinds, kind)
			b.ends = append(b.ends, len(data))
			if kind == recEnd {
				send(b)
				return nil
			}
			if len(b.kinds) == batchRows || len(data) >= 1<<20 {
				if !send(b) {
					return nil
				}
				b = newBatch(n + 1)
			}
		}
	}
	var (
		index   uint64
		count   uint64
		sawMeta bool
		sawEnd  bool
		tenants = map[string]string{}
	)
	consume := func(rows []any) error {
		for _, row := range rows {
			var err error
			switch x := row.(type) {
			case metaRow:
				index, sawMeta = x.index, true
				err = r.Meta(x.index, x.nextQueueSeq)
				if err == nil {
					err = r.ClusterID(x.clusterID)
				}
				if err == nil && x.rules > RulesCurrent {
					err = fmt.Errorf("%s: the snapshot at index %d is under rules %d, this build applies rules up to %d; "+
						"upgrade this head to a build with rules %d or later", ErrRulesTooNew, x.index, x.rules, RulesCurrent, x.rules)
				}
				if err == nil {
					err = r.Rules(x.rules)
				}
			case *state.Graph:
				x.Tenant = internTenant(tenants, x.Tenant)
				err = r.Graph(x)
			case *state.Task:
				x.Tenant = internTenant(tenants, x.Tenant)
				err = r.Task(x)
			case *state.StagedChunk:
				err = r.Staged(x)
			case *state.Worker:
				err = r.Worker(x)
			case *state.Quota:
				err = r.Quota(x)
			case *wire.PoolTarget:
				err = r.PoolTarget(x)
			case *wire.Snapshot:
				err = r.Snapshot(x)
			case *state.AdmissionPolicy:
				err = r.AdmissionPolicy(x.P)
			case archivedRow:
				x.g.Tenant = internTenant(tenants, x.g.Tenant)
				err = r.Archived(x.g)
			case *wire.Token:
				err = r.Token(x)
			case endRow:
				if x.count != count {
					return fmt.Errorf("end record: %d records read, end says %d", count, x.count)
				}
				sawEnd = true
			}
			if err != nil {
				return fmt.Errorf("record %d: %w", count, err)
			}
			count++
		}
		return nil
	}
	if err := runOrdered(runtime.GOMAXPROCS(0), produce, decodeBatch, consume); err != nil {
		return 0, err
	}
	if !sawMeta || !sawEnd {
		return 0, errors.New("snapshot has no meta or no end record")
	}
	if err := r.Finish(); err != nil {
		return 0, fmt.Errorf("snapshot at index %d is inconsistent: %w", index, err)
	}
	return index, nil
}

// decodeBatch decodes a run of records into rows. Strings are shared within
// the batch as a submission shares them within a graph.
func decodeBatch(b *rawBatch) ([]any, error) {
	// Decoding copies what it keeps; the raw bytes can serve another batch.
	defer bufPool.Put(b.data)
	data := *b.data
	rows := make([]any, 0, len(b.kinds))
	in := newInterner()
	var wt wire.Task
	start := 0
	for i, kind := range b.kinds {
		buf := data[start:b.ends[i]]
		start = b.ends[i]
		n := b.first + uint64(i)
		switch kind {
		case recMeta:
			index, k := binary.Uvarint(buf)
			if k <= 0 {
				return nil, fmt.Errorf("record %d: bad meta", n)
			}
			seq, k2 := binary.Uvarint(buf[k:])
			if k2 <= 0 {
				return nil, fmt.Errorf("record %d: bad meta", n)
			}
			// Older snapshots end before the cluster id, or before the
			// rules version: 0 for what is missing.
			var cluster, rules uint64
			if rest := buf[k+k2:]; len(rest) > 0 {
				c, k3 := binary.Uvarint(rest)
				if k3 <= 0 {
					return nil, fmt.Errorf("record %d: bad meta (cluster id)", n)
				}
				cluster = c
				if rest = rest[k3:]; len(rest) > 0 {
					r, k4 := binary.Uvarint(rest)
					if k4 <= 0 {
						return nil, fmt.Errorf("record %d: bad meta (rules version)", n)
					}
					rules = r
				}
			}
			rows = append(rows, metaRow{index, seq, cluster, rules})
		case recGraph:
			w := &wire.Graph{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: graph: %w", n, err)
			}
			rows = append(rows, state.GraphFromWire(w))
		case recTask:
			// wt is reused: Unmarshal resets it, and the row keeps only
			// what the decoding allocated afresh (spec, slices, strings).
			if err := proto.Unmarshal(buf, &wt); err != nil {
				return nil, fmt.Errorf("record %d: task: %w", n, err)
			}
			t, err := state.TaskFromWire(&wt)
			if err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			in.spec(t.Spec)
			if t.Spec.Name == t.Name() {
				t.Spec.Name = t.Name() // share the id's bytes
			}
			for i, d := range t.Dependents {
				t.Dependents[i] = in.str(d)
			}
			rows = append(rows, t)
		case recStaged:
			c := &wire.SubmitGraphCommand{}
			if err := proto.Unmarshal(buf, c); err != nil {
				return nil, fmt.Errorf("record %d: staged chunk: %w", n, err)
			}
			rows = append(rows, &state.StagedChunk{GraphID: c.GetHeader().GetId(), Chunk: c.GetChunk(), Command: c})
		case recWorker:
			w := &wire.Worker{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: worker: %w", n, err)
			}
			row, err := state.WorkerFromWire(w)
			if err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			rows = append(rows, row)
		case recQuota:
			w := &wire.Quota{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: quota: %w", n, err)
			}
			row, err := state.QuotaFromWire(w)
			if err != nil {
				return nil, fmt.Errorf("record %d: %w", n, err)
			}
			rows = append(rows, row)
		case recPool:
			w := &wire.PoolTarget{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: pool target: %w", n, err)
			}
			rows = append(rows, w)
		case recSnapshot:
			w := &wire.Snapshot{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: snapshot: %w", n, err)
			}
			rows = append(rows, w)
		case recAdmission:
			w := &wire.AdmissionPolicy{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: admission policy: %w", n, err)
			}
			rows = append(rows, &state.AdmissionPolicy{P: w})
		case recArchive:
			w := &wire.Graph{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: archived graph: %w", n, err)
			}
			rows = append(rows, archivedRow{w})
		case recToken:
			w := &wire.Token{}
			if err := proto.Unmarshal(buf, w); err != nil {
				return nil, fmt.Errorf("record %d: token: %w", n, err)
			}
			rows = append(rows, w)
		case recEnd:
			want, k := binary.Uvarint(buf)
			if k <= 0 {
				return nil, fmt.Errorf("record %d: bad end record", n)
			}
			rows = append(rows, endRow{want})
		default:
			return nil, fmt.Errorf("record %d: unknown kind %d", n, kind)
		}
	}
	return rows, nil
}

func internTenant(m map[string]string, s string) string {
	if c, ok := m[s]; ok {
		return c
	}
	m[s] = s
	return s
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
