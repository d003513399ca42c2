package client

import (
	"context"

	"github.com/megaflow/megaflow/internal/wire"
)

// AdmissionPolicy bounds what the containers of one tenant's tasks and
// sandboxes may ask for (network, added capabilities) and what is forced
// on them (user, read-only root, process limit); with an empty tenant it
// is the cluster row, the policy of every tenant without one of its own
// (docs/security.md).
type AdmissionPolicy = wire.AdmissionPolicy

// AdmissionPolicySource says where a tenant's effective policy comes from:
// its row, the cluster row or the built-in default (of a cluster without
// ACLs, or of one whose ACLs were bootstrapped: nobody, 65534:65534).
type AdmissionPolicySource = wire.AdmissionPolicySource

// Where an effective admission policy comes from.
const (
	AdmissionFromTenant  = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_TENANT
	AdmissionFromCluster = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_CLUSTER
	AdmissionFromDefault = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT
	// AdmissionFromACLDefault is the built-in default of a cluster whose
	// ACLs were bootstrapped: every container runs as 65534:65534.
	AdmissionFromACLDefault = wire.AdmissionPolicySource_ADMISSION_POLICY_SOURCE_DEFAULT_ACL
)

// SetAdmissionPolicy replaces tenant p.Tenant's admission policy in the
// replicated table (the whole policy: fields not set allow nothing or
// force nothing). A policy equal to the built-in default in force
// (AllowedNetworks ["*"], nothing else; with ACLs bootstrapped also
// RunAsUser "65534:65534") removes the row. Submissions are
// checked against it from the returned Raft index on; tasks already
// committed run under the policy in force when they are assigned. It
// returns the index and whether the row was removed. Errors:
// errs.InvalidArgument (no tenant, a field out of its bounds),
// errs.FailedPrecondition (the cluster is below rules 5).
func (c *Client) SetAdmissionPolicy(ctx context.Context, p *AdmissionPolicy) (index uint64, removed bool, err error) {
	return c.setAdmissionPolicy(ctx, &wire.SetAdmissionPolicyRequest{Policy: p})
}

// SetClusterAdmissionPolicy sets the cluster row (p.Tenant must be empty):
// the policy of every tenant without a row of its own. As
// SetAdmissionPolicy otherwise.
func (c *Client) SetClusterAdmissionPolicy(ctx context.Context, p *AdmissionPolicy) (index uint64, removed bool, err error) {
	return c.setAdmissionPolicy(ctx, &wire.SetAdmissionPolicyRequest{Policy: p, Cluster: true})
}

func (c *Client) setAdmissionPolicy(ctx context.Context, req *wire.SetAdmissionPolicyRequest) (uint64, bool, error) {
	var res *wire.SetAdmissionPolicyResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.SetAdmissionPolicy(ctx, req)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	c.observe(res.Index)
	return res.Index, res.Removed, nil
}

// GetAdmissionPolicy returns tenant's effective admission policy ("" is
// "default") and where it comes from.
func (c *Client) GetAdmissionPolicy(ctx context.Context, tenant string, ro ReadOptions) (*AdmissionPolicy, AdmissionPolicySource, error) {
	var res *wire.GetAdmissionPolicyResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.GetAdmissionPolicy(ctx, &wire.GetAdmissionPolicyRequest{Tenant: tenant, Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	c.observe(res.Meta.GetIndex())
	return res.Policy, res.Source, nil
}

// ListAdmissionPolicies returns every admission policy row, the cluster row
// (empty tenant) first, then by tenant.
func (c *Client) ListAdmissionPolicies(ctx context.Context, ro ReadOptions) ([]*AdmissionPolicy, error) {
	var res *wire.ListAdmissionPoliciesResponse
	err := c.call(ctx, func(ctx context.Context, s wire.MegaflowServiceClient) (err error) {
		res, err = s.ListAdmissionPolicies(ctx, &wire.ListAdmissionPoliciesRequest{Read: c.readOptions(ro)})
		return err
	})
	if err != nil {
		return nil, err
	}
	c.observe(res.Meta.GetIndex())
	return res.Policies, nil
}
