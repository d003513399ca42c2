package artifact

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/megaflow/megaflow/internal/blob"
)

// Key names under an attempt's prefix; see the package doc.
const (
	// ManifestName is the manifest's name under the attempt prefix.
	ManifestName = "manifest.json"
	// ResultName is the stored result's name under the attempt prefix and
	// its path in the manifest.
	ResultName = "result.json"
	logDir     = "log/"
	outDir     = "out/"
)

// Attempt identifies one attempt's artifacts.
type Attempt struct {
	Tenant string
	// GraphID and TaskName are the graph's id and the task's name within it.
	GraphID  string
	TaskName string
	// Number is the 1-based attempt number.
	Number uint32
}

// ForTask returns the Attempt of task id "<graph>/<name>" of tenant.
func ForTask(tenant, graphID, taskID string, number uint32) Attempt {
	return Attempt{Tenant: tenant, GraphID: graphID, TaskName: strings.TrimPrefix(taskID, graphID+"/"), Number: number}
}

// Prefix is the attempt's key prefix, ending in "/".
func (a Attempt) Prefix() string {
	return blob.AttemptPrefix(a.Tenant, a.GraphID, a.TaskName, a.Number)
}

// TaskPrefix is the prefix of every attempt of the task, ending in "/".
func (a Attempt) TaskPrefix() string { return a.Tenant + "/" + a.GraphID + "/" + a.TaskName + "/" }

// GraphPrefix is the prefix of every artifact of graph graphID of tenant.
func GraphPrefix(tenant, graphID string) string { return tenant + "/" + graphID + "/" }

// ParseManifestKey returns the attempt whose manifest key is key
// ("<tenant>/<graph>/<task>/<attempt>/manifest.json"), or false when key
// is no manifest key.
func ParseManifestKey(key string) (Attempt, bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 5 || parts[4] != ManifestName || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Attempt{}, false
	}
	n, err := strconv.ParseUint(parts[3], 10, 32)
	if err != nil || n == 0 {
		return Attempt{}, false
	}
	a := Attempt{Tenant: parts[0], GraphID: parts[1], TaskName: parts[2], Number: uint32(n)}
	return a, a.ManifestKey() == key
}

// LogKey is the key of log chunk n (1-based).
func (a Attempt) LogKey(n uint32) string { return fmt.Sprintf("%s%s%06d", a.Prefix(), logDir, n) }

// LogPrefix is the prefix of the attempt's log chunks.
func (a Attempt) LogPrefix() string { return a.Prefix() + logDir }

// ManifestKey is the key of the attempt's manifest.
func (a Attempt) ManifestKey() string { return a.Prefix() + ManifestName }

// FileKey is the key of a manifest path: the result, or an output file
// stored under out/.
func (a Attempt) FileKey(path string) string {
	if path == ResultName {
		return a.Prefix() + ResultName
	}
	return a.Prefix() + outDir + path
}

// chunkNumber parses the chunk number of a log key under prefix, or 0.
func chunkNumber(prefix, key string) uint32 {
	var n uint32
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) != 6 {
		return 0
	}
	if _, err := fmt.Sscanf(rest, "%06d", &n); err != nil {
		return 0
	}
	return n
}
