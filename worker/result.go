package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ResultPrefix starts the output line that carries a task's result: the
// last line of the task's output (stdout or stderr, which share the log
// file) that starts with "MEGAFLOW_RESULT " holds the task's JSON result,
// at most MaxResultBytes, which the worker sends with the EXITED event of a
// zero exit. The line must be among the last ResultScanBytes of output.
// With an artifact store, a result over MaxResultBytes goes to the store
// (result.json) and the event carries an artifact.Ref to it instead.
const ResultPrefix = "MEGAFLOW_RESULT "

// Bounds on results.
const (
	// MaxResultBytes is the largest result the task table holds, in bytes
	// of JSON.
	MaxResultBytes = 64 << 10
	// ResultScanBytes is how much of the end of the log is searched.
	ResultScanBytes = 1 << 20
)

// readResult finds the result line in the log file at path. It returns the
// JSON, or a note saying why a result line was ignored; both are empty when
// there is no result line (or no log file).
// A result over limit (bytes) is ignored with a note; the worker passes
// MaxResultBytes, or ResultScanBytes when it stores larger results as
// artifacts.
func readResult(path string, limit int) (result []byte, note string) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ""
		}
		return nil, "MEGAFLOW_RESULT not read: " + err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, "MEGAFLOW_RESULT not read: " + err.Error()
	}
	off := max(st.Size()-ResultScanBytes, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, "MEGAFLOW_RESULT not read: " + err.Error()
	}
	return parseResult(buf, off > 0, limit)
}

// parseResult finds the last result line in tail; partial says tail starts
// in the middle of a line, which is then skipped.
func parseResult(tail []byte, partial bool, limit int) ([]byte, string) {
	if partial {
		i := bytes.IndexByte(tail, '\n')
		if i < 0 {
			return nil, ""
		}
		tail = tail[i+1:]
	}
	prefix := []byte(ResultPrefix)
	var line []byte
	found := false
	for len(tail) > 0 {
		end := bytes.LastIndexByte(tail, '\n')
		cur := tail[end+1:]
		tail = tail[:max(end, 0)]
		if bytes.HasPrefix(cur, prefix) {
			line, found = cur, true
			break
		}
		if end < 0 {
			break
		}
	}
	if !found {
		return nil, ""
	}
	payload := bytes.TrimSpace(line[len(prefix):])
	if len(payload) > limit {
		return nil, fmt.Sprintf("MEGAFLOW_RESULT line ignored: the result is %d bytes, the limit is %d", len(payload), limit)
	}
	if !json.Valid(payload) {
		return nil, "MEGAFLOW_RESULT line ignored: not valid JSON"
	}
	return bytes.Clone(payload), ""
}

// maxResultBytes is the largest result the worker reads from a log: over
// MaxResultBytes only when such results can go to the artifact store.
func (w *Worker) maxResultBytes() int {
	if w.artifactsOn() {
		return ResultScanBytes
	}
	return MaxResultBytes
}
