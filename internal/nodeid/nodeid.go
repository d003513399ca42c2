// Package nodeid owns what a node id may be: the name a worker (and, in
// its certificate, a head) goes by in gossip, on the worker stream, in its
// containers' labels and names, and in its TLS certificate's DNS name
// <id>.worker.megaflow. It imports only the standard library, so the
// worker, the TLS package and cmd/ share one rule.
package nodeid

import "fmt"

// MaxLen is the longest node id, in bytes.
const MaxLen = 64

// Problem returns "" when id is a valid node id: 1 to MaxLen bytes of
// ASCII letters, digits, '.', '_' and '-', starting with a letter or digit
// (so that it can be a container label value, part of a container name,
// and the first labels of a DNS name). Otherwise it says what is wrong, as
// a phrase that reads after the id: `--node-id "w/1" has '/' at byte 1;
// ...`.
func Problem(id string) string {
	if id == "" {
		return "is empty; use 1 to 64 ASCII letters, digits, '.', '_' or '-'"
	}
	if len(id) > MaxLen {
		return fmt.Sprintf("is %d bytes long; the limit is %d", len(id), MaxLen)
	}
	for i := 0; i < len(id); i++ {
		if !isNameByte(id[i]) {
			return fmt.Sprintf("has %q at byte %d; use only ASCII letters, digits, '.', '_' and '-'", id[i], i)
		}
	}
	if !isAlnum(id[0]) {
		return "must start with a letter or digit"
	}
	return ""
}

func isAlnum(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

func isNameByte(b byte) bool { return isAlnum(b) || b == '.' || b == '_' || b == '-' }
