package spec

import (
	"fmt"
	"testing"
)

func BenchmarkValidateChain100k(b *testing.B) {
	g := bigGraph(100_000, func(i int) []string {
		if i == 0 {
			return nil
		}
		return []string{fmt.Sprintf("t%06d", i-1)}
	})
	lim := DefaultLimits()
	b.ResetTimer()
	for b.Loop() {
		if err := Validate(g, lim); err != nil {
			b.Fatal(err)
		}
	}
}
