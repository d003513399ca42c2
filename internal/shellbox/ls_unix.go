//go:build unix

package shellbox

import (
	"io/fs"
	"strconv"
	"syscall"
)

// ownerOf returns a file's link count and numeric owner and group (an
// image FROM scratch may have no /etc/passwd to name them).
func ownerOf(fi fs.FileInfo) (links uint64, uid, gid string) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink), strconv.FormatUint(uint64(st.Uid), 10), strconv.FormatUint(uint64(st.Gid), 10)
	}
	return 1, "0", "0"
}

// blocksOf returns a file's size in 1 KiB blocks, as ls -l's total counts.
func blocksOf(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) / 2
	}
	return (fi.Size() + 1023) / 1024
}
