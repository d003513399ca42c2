package cluster

import "testing"

// TestFreeAddrNeverRepeats: the addresses of one process never repeat
// within a walk. A random pick per call (what FreeAddr did before) repeats
// about 130 times in 2,000 calls, and two members of one cluster given the
// same port fail to start with "bind: address already in use".
func TestFreeAddrNeverRepeats(t *testing.T) {
	seen := map[string]int{}
	for i := range 2000 {
		a, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if j, ok := seen[a]; ok {
			t.Fatalf("call %d returned %s, as call %d did", i, a, j)
		}
		seen[a] = i
	}
}
