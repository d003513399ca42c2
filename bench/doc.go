// Package bench holds MegaFlow's benchmark harness: Go benchmarks that
// measure the head's write path, its table's memory and its snapshots, and
// report them as ratios against a bare hashicorp/raft baseline measured in
// the same run on the same machine. Everything is in _test.go files; this
// package exports nothing and nothing imports it. README.md says what each
// benchmark measures, how to run it and what it measured here.
package bench
