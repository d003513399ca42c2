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
	// A goroutine forwards the client's chunks while this one waits for
	// the worker's answer, which can come before the client's last chunk:
	// a worker that refused the tar, or ended an upload whose client went
	// quiet (worker.Config.UploadIdle), is answered at once, and the
	// client's stream with it. The goroutine then waits in Recv for a
	// chunk that may never come; it ends with the client's stream (Recv
	// fails once this call returned).
	type forwarded struct {
		sent int
		err  error // the client's stream failed
	}
	fwd := make(chan forwarded, 1)
	go func() {
		m := proto.Clone(first).(*wire.SandboxUploadArchiveRequest)
		m.Attempt = n
		var sent int
		for {
			sent += len(m.GetData())
			if err := up.Send(m); err != nil {
				fwd <- forwarded{sent: sent} // the worker ended the stream: its answer says why
				return
			}
			var err error
			m, err = stream.Recv()
			if errors.Is(err, io.EOF) {
				fwd <- forwarded{sent: sent, err: up.CloseSend()}
				return
			}
			if err != nil {
				fwd <- forwarded{sent: sent, err: err} // the client went away; the worker's stream ends with this call's context
				return
			}
			m.Attempt = n
		}
	}()
	resp := new(wire.SandboxUploadArchiveResponse)
	if err := up.RecvMsg(resp); err != nil {
		return relayErr(id, worker, err)
	}
	f := <-fwd // the worker answered after the client's last chunk
	if f.err != nil {
		return f.err
	}
	s.metrics.addFileBytes("write", f.sent)
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
