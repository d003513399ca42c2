package head

import (
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// UploadArchive relays a client's tar stream to the sandbox's worker,
// message by message (each at most spec.SandboxArchiveChunk, checked by
// the bounds interceptor), and its answer back. The first message names
// the sandbox and the directory; the worker checks the entries and the
// total size.
func (s *sandboxService) UploadArchive(stream grpc.ClientStreamingServer[wire.SandboxUploadArchiveRequest, wire.SandboxUploadArchiveResponse]) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return errs.ToStatus(errs.New(errs.InvalidArgument, "upload: the stream ended before its first message (sandbox_id, path)"))
	}
	if err != nil {
		return err
	}
	id := first.GetSandboxId()
	if err := spec.CheckSandboxPath(id, first.GetPath()); err != nil {
		return errs.ToStatus(err)
	}
	cli, n, worker, err := s.target(stream.Context(), id, first.GetMinIndex())
	if err != nil {
		return errs.ToStatus(err)
	}
	s.activity.begin(id, s.h.clock.Now())
	defer func() { s.activity.end(id, s.h.clock.Now()) }()
	up, err := cli.UploadArchive(stream.Context())
	if err != nil {
		return relayErr(id, worker, err)
	}
	m := proto.Clone(first).(*wire.SandboxUploadArchiveRequest)
	m.Attempt = n
	var sent int
	for {
		sent += len(m.GetData())
		if err := up.Send(m); err != nil {
			// The worker ended the stream: its answer says why.
			break
		}
		m, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err // the client went away; the worker's stream ends with this call's context
		}
		m.Attempt = n
	}
	resp, err := up.CloseAndRecv()
	if err != nil {
		return relayErr(id, worker, err)
	}
	s.metrics.addFileBytes("write", sent)
	return stream.SendAndClose(resp)
}

// DownloadArchive relays a tar stream from the sandbox's worker.
func (s *sandboxService) DownloadArchive(req *wire.SandboxDownloadArchiveRequest, stream grpc.ServerStreamingServer[wire.SandboxDownloadArchiveResponse]) error {
	if err := spec.CheckSandboxPath(req.GetSandboxId(), req.GetPath()); err != nil {
		return errs.ToStatus(err)
	}
	cli, n, worker, err := s.target(stream.Context(), req.GetSandboxId(), req.GetMinIndex())
	if err != nil {
		return errs.ToStatus(err)
	}
	s.activity.begin(req.GetSandboxId(), s.h.clock.Now())
	defer func() { s.activity.end(req.GetSandboxId(), s.h.clock.Now()) }()
	out := proto.Clone(req).(*wire.SandboxDownloadArchiveRequest)
	out.Attempt = n
	st, err := cli.DownloadArchive(stream.Context(), out)
	if err != nil {
		return relayErr(req.GetSandboxId(), worker, err)
	}
	return relayChunks(s, req.GetSandboxId(), worker, st.Recv, stream.Send)
}
