package client

import (
	"context"

	"github.com/megaflow/megaflow/internal/spec"
	"github.com/megaflow/megaflow/internal/wire"
)

type (
	// ServiceStatus is one service name with the tasks serving it and
	// their ready endpoints.
	ServiceStatus = wire.ServiceStatus
	// ServiceEndpoint is one ready endpoint ("http://host:port") of a
	// service, with the attempt and worker serving it.
	ServiceEndpoint = wire.ServiceEndpoint
)

// ServiceEnvVar returns the environment variable in which a task that
// names service name in uses_services receives its ready endpoints,
// comma-separated: "MEGAFLOW_SERVICE_" and the name upper-cased with every
// character other than an ASCII letter or digit turned into '_'
// ("model/qwen-7b" gives MEGAFLOW_SERVICE_MODEL_QWEN_7B).
func ServiceEnvVar(name string) string { return spec.ServiceEnvVar(name) }

// ListServices returns the services that have a task of kind service that
// has not ended, sorted by name, each with its ready endpoints (sorted by
// URL) and its tasks; with a non-empty name, only that service (none if
// nothing serves it). Errors: errs.InvalidArgument for a name that is not
// a service name, before any call.
func (c *Client) ListServices(ctx context.Context, name string, ro ReadOptions) ([]*ServiceStatus, error) {
	if name != "" {
		if err := spec.CheckServiceName(name); err != nil {
			return nil, err
		}
	}
	var res *wire.ServiceListResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ListServices(ctx, &wire.ServiceListRequest{Name: name, Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.Meta.GetIndex())
	return res.Services, nil
}
