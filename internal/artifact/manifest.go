package artifact

import (
	"encoding/json"
	"fmt"
)

// ManifestVersion is the version of the manifest format written here.
const ManifestVersion = 1

// Manifest lists what one attempt stored. The worker uploads it last, as
// JSON under ManifestKey; a reader trusts only files it lists.
type Manifest struct {
	Version int    `json:"version"`
	TaskID  string `json:"task_id"`
	Attempt uint32 `json:"attempt"`
	// LogChunks and LogBytes: the log's chunks (numbered 1..LogChunks) and
	// total size in bytes.
	LogChunks uint32 `json:"log_chunks"`
	LogBytes  int64  `json:"log_bytes"`
	// Files are the collected output files, by path.
	Files []File `json:"files,omitempty"`
	// Result is the stored result when it was larger than the table's
	// limit (path ResultName).
	Result *File `json:"result,omitempty"`
	// Notes say which declared output paths were missing or refused, and why.
	Notes []string `json:"notes,omitempty"`
}

// File is one stored file.
type File struct {
	// Path is slash-separated and relative to the output directory.
	Path string `json:"path"`
	// Size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lowercase hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
	// ContentType is guessed from the path's extension, else from the
	// first 512 bytes (net/http.DetectContentType).
	ContentType string `json:"content_type"`
}

// Find returns the file with path p (the result included), or false.
func (m *Manifest) Find(p string) (File, bool) {
	if m.Result != nil && p == ResultName {
		return *m.Result, true
	}
	for _, f := range m.Files {
		if f.Path == p {
			return f, true
		}
	}
	return File{}, false
}

// ParseManifest decodes a manifest, refusing versions it does not know.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Version != ManifestVersion {
		return nil, fmt.Errorf("manifest: version %d, this build reads %d", m.Version, ManifestVersion)
	}
	return &m, nil
}

// Ref is what the task table holds instead of a JSON result larger than
// its limit: {"megaflow_artifact":"result.json","size":N,"sha256":"..."}.
// Children receive it in MEGAFLOW_PARENT_<NAME>_RESULT; the result itself
// is fetched with ArtifactGet (megaflow artifacts get TASK result.json).
type Ref struct {
	Artifact string `json:"megaflow_artifact"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
}
