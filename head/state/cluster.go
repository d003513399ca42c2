package state

import (
	"fmt"
	"strconv"
)

// The cluster id: a nonzero 64-bit number chosen by the cluster's first
// leader (it proposes OpSetClusterID once it finds none in the table), kept
// in the meta table and in snapshots, and shown as 16 hex digits. Workers
// label their containers with it, so that two clusters sharing a container
// engine never touch each other's containers, whatever their names.

// metaClusterID is the meta key of the cluster id; absent (0) until set.
const metaClusterID = "cluster_id"

// FormatClusterID renders a cluster id as 16 lowercase hex digits; 0 (not
// set) as "".
func FormatClusterID(id uint64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("%016x", id)
}

// ParseClusterID is FormatClusterID's inverse: "" is 0; anything but 16 hex
// digits is an error.
func ParseClusterID(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	if len(s) != 16 {
		return 0, fmt.Errorf("cluster id %q: want 16 hex digits", s)
	}
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("cluster id %q: want 16 hex digits, not all zero", s)
	}
	return id, nil
}

// ClusterID returns the cluster id, 0 before it is set.
func (v *View) ClusterID() uint64 { return readMeta(v.txn(), metaClusterID) }

// SetClusterID sets the cluster id to id if none is set yet and returns the
// cluster's id afterwards: the first OpSetClusterID wins, a later one (two
// leaders racing after a bootstrap) changes nothing. id 0 changes nothing.
func (t *Txn) SetClusterID(id uint64) uint64 {
	if cur := readMeta(t.mem, metaClusterID); cur != 0 || id == 0 {
		return cur
	}
	must(t.mem.Insert(tableMeta, &metaRow{Key: metaClusterID, Value: id}))
	return id
}

// ClusterID sets the cluster id of a snapshot being restored; 0 (a
// snapshot from before cluster ids) sets none.
func (r *Restore) ClusterID(id uint64) error {
	if id == 0 {
		return nil
	}
	return r.mem.Insert(tableMeta, &metaRow{Key: metaClusterID, Value: id})
}
