package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/wire"
)

// fakeSaver answers SnapshotSave with data in two chunks, then info.
type fakeSaver struct {
	wire.UnimplementedOperatorServiceServer
	data []byte
	info *wire.SnapshotInfo
}

func (f *fakeSaver) SnapshotSave(_ *wire.SnapshotSaveRequest, s wire.OperatorService_SnapshotSaveServer) error {
	half := len(f.data) / 2
	for _, d := range [][]byte{f.data[:half], f.data[half:]} {
		if err := s.Send(&wire.SnapshotChunk{Data: d}); err != nil {
			return err
		}
	}
	return s.Send(&wire.SnapshotChunk{Info: f.info})
}

// SnapshotSave checks what it received against the head's length and
// SHA-256: a match returns the info, a mismatch an error that says the
// output is damaged and to save again.
func TestSnapshotSaveChecksTheHeadsSHA256(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := []byte("a snapshot's bytes, in two chunks")
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		name, sha, wantErr string
	}{
		{"match", good, ""},
		{"mismatch", strings.Repeat("0", 64), "the received bytes have SHA-256 " + good + ", the head's snapshot has " + strings.Repeat("0", 64) + "; the output is damaged: discard it and save again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			wire.RegisterOperatorServiceServer(srv, &fakeSaver{data: data, info: &wire.SnapshotInfo{SizeBytes: uint64(len(data)), Sha256: tc.sha}})
			go srv.Serve(lis)
			t.Cleanup(srv.Stop)
			c, err := client.Dial(ctx, []string{lis.Addr().String()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var out bytes.Buffer
			info, err := c.SnapshotSave(ctx, &out)
			if tc.wantErr == "" {
				if err != nil || info.GetSha256() != good || !bytes.Equal(out.Bytes(), data) {
					t.Fatalf("save: %v, %v, %q; want the info and the data", info, err, out.Bytes())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || info != nil {
				t.Fatalf("save: %v, %v; want no info and an error containing %q", info, err, tc.wantErr)
			}
		})
	}
}
