package head

import (
	"context"

	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

// ListServices returns the services that have a task that has not ended,
// by name, each with its ready endpoints (head/state/service.go), or only
// the service req.name. A name that is not a service name is
// InvalidArgument; a well-formed name nothing serves gives an empty list.
func (s *service) ListServices(ctx context.Context, req *wire.ServiceListRequest) (*wire.ServiceListResponse, error) {
	if n := req.GetName(); n != "" {
		if err := spec.CheckServiceName(n); err != nil {
			return nil, errs.ToStatus(err)
		}
	}
	view, meta, err := s.h.read(ctx, req.GetRead())
	if err == errForward {
		resp, err := forward(ctx, s.h.fwd, req, wire.MegaflowServiceClient.ListServices)
		return resp, errs.ToStatus(err)
	}
	if err != nil {
		return nil, errs.ToStatus(err)
	}
	out := &wire.ServiceListResponse{Meta: meta}
	add := func(svc state.Service) {
		if len(svc.Tasks) == 0 {
			return
		}
		st := &wire.ServiceStatus{Name: svc.Name}
		for _, t := range svc.Tasks {
			st.TaskIds = append(st.TaskIds, t.ID)
		}
		for _, e := range svc.Endpoints() {
			st.Endpoints = append(st.Endpoints, &wire.ServiceEndpoint{Url: e.URL, TaskId: e.TaskID, Attempt: e.Attempt,
				WorkerId: e.WorkerID, ReadyUnixNanos: e.ReadyUnixNanos})
		}
		out.Services = append(out.Services, st)
	}
	if n := req.GetName(); n != "" {
		add(view.Service(n))
		return out, nil
	}
	for svc := range view.Services() {
		add(svc)
	}
	return out, nil
}
