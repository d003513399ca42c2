// Package shellbox is a small POSIX shell and the handful of core tools
// that MegaFlow's images built FROM scratch need, in one static Go program
// (cmd/megaflow-sh): no Debian package, no busybox.
//
// The shell is mvdan.cc/sh/v3's interpreter. The tools (Tools lists them)
// are written here and cover what the demo's agent runs (ls -la, find
// -type f, grep -rn, head -N, wc -l, cat, echo with >>) and what a warm
// container's idle process needs (sleep, and trap "exit 0" TERM). Inside
// the shell a tool runs in-process, without a fork; as a program (a
// symlink named after the tool, or megaflow-sh TOOL ARGS) it runs alone.
//
// Signals differ from a POSIX shell in one way: a signal trapped with
// `trap ACTION SIG` ends the running script, then the shell runs ACTION
// and exits with its status, where a POSIX shell would resume the script
// after ACTION. The idle loop of a warm container (trap "exit 0" TERM;
// while :; do sleep 3600 & wait; done) behaves the same under both.
//
// Only cmd/megaflow-sh and its tests import this package.
package shellbox
