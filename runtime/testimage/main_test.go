package testimage

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestMain removes what the tests left and fails the run if they left any
// container behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if cli, err := client.New(client.FromEnv); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		left, err := Sweep(ctx, cli)
		cancel()
		if err == nil && len(left) > 0 {
			fmt.Fprintf(os.Stderr, "tests left containers behind: %v\n", left)
			code = 1
		}
	}
	os.Exit(code)
}
