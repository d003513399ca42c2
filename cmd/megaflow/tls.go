package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/tlsconfig"
)

// tlsCmd is `megaflow tls`: the CA, the role certificates and the gossip
// key of a cluster, made locally (crypto/x509; no cluster is contacted).
func tlsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Make a cluster's TLS CA, head/worker/client certificates and gossip key",
		Long: `Make what a cluster's mutual TLS needs (docs/security.md), locally:

  megaflow tls ca create --dir D                       D/ca.pem, D/ca-key.pem
  megaflow tls cert create --head --node-id h1 --ca D/ca.pem --ca-key D/ca-key.pem --dir D
                                                       D/h1.pem, D/h1-key.pem
  megaflow tls cert create --worker --node-id w1 --ca D/ca.pem --ca-key D/ca-key.pem --dir D
  megaflow tls cert create --client --ca D/ca.pem --ca-key D/ca-key.pem --dir D --name alice
  megaflow tls gossip-key                              a --gossip-key value

Each certificate names its role (DNS name head.megaflow, worker.megaflow or
client.megaflow): a worker certificate cannot act as a head. A head or
worker certificate also names its node (w1.worker.megaflow): the heads
refuse a worker stream or sandbox server whose certificate is another
worker's, so --node-id must be the daemon's --node-id. Keys are ECDSA
P-256, written with mode 0600; nothing is overwritten without --force.`,
	}
	cmd.AddCommand(tlsCACmd(g), tlsCertCmd(g), tlsGossipKeyCmd(g))
	return cmd
}

func tlsCACmd(g *globals) *cobra.Command {
	ca := &cobra.Command{Use: "ca", Short: "Make a cluster's certificate authority"}
	var dir, name string
	var validity time.Duration
	var force bool
	create := &cobra.Command{
		Use:   "create --dir D",
		Short: "Write a new CA: D/ca.pem and D/ca-key.pem (keep ca-key.pem off the cluster's machines)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errs.New(errs.InvalidArgument, "--dir is required: the directory for ca.pem and ca-key.pem")
			}
			p, err := tlsconfig.NewCA(tlsconfig.CARequest{Name: name, Validity: validity, Now: time.Now()})
			if err != nil {
				return errs.New(errs.InvalidArgument, "tls ca create: %v", err)
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
			if err := tlsconfig.WriteFiles(certPath, keyPath, p, force); err != nil {
				return errs.New(errs.FailedPrecondition, "tls ca create: %v", err)
			}
			fmt.Fprintf(g.stdout, "wrote %s and %s (mode 0600)\n", certPath, keyPath)
			return nil
		},
	}
	create.Flags().StringVar(&dir, "dir", "", "directory to write ca.pem and ca-key.pem to (required)")
	create.Flags().StringVar(&name, "name", "MegaFlow CA", "the CA's common name")
	create.Flags().DurationVar(&validity, "validity", tlsconfig.DefaultCAValidity, "how long the CA is valid (1h to 87600h)")
	create.Flags().BoolVar(&force, "force", false, "overwrite existing files")
	ca.AddCommand(create)
	return ca
}

func tlsCertCmd(g *globals) *cobra.Command {
	cert := &cobra.Command{Use: "cert", Short: "Make a head, worker or client certificate"}
	var isHead, isWorker, isClient, force bool
	var caPath, caKeyPath, dir, name, nodeID, hosts string
	var validity time.Duration
	create := &cobra.Command{
		Use:   "create (--head|--worker --node-id ID | --client --name N) --ca D/ca.pem --ca-key D/ca-key.pem --dir D [--name N] [--host h,...]",
		Short: "Write a certificate of one role (and, for a head or worker, one node) signed by the CA: D/N.pem and D/N-key.pem",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var roles []tlsconfig.Role
			for _, r := range []struct {
				on   bool
				role tlsconfig.Role
			}{{isHead, tlsconfig.RoleHead}, {isWorker, tlsconfig.RoleWorker}, {isClient, tlsconfig.RoleClient}} {
				if r.on {
					roles = append(roles, r.role)
				}
			}
			if len(roles) != 1 {
				return errs.New(errs.InvalidArgument, "give exactly one of --head, --worker and --client")
			}
			switch {
			case roles[0] == tlsconfig.RoleClient && nodeID != "":
				return errs.New(errs.InvalidArgument, "--node-id is for --head and --worker: a client certificate names no node")
			case roles[0] != tlsconfig.RoleClient && nodeID == "":
				ex := string(roles[0])[:1] + "1"
				return errs.New(errs.InvalidArgument, "--%s needs --node-id, the --node-id the %s runs with (e.g. --node-id %s): the certificate names that %s only (%s)",
					roles[0], roles[0], ex, roles[0], roles[0].NodeName(ex))
			}
			if name == "" {
				name = nodeID // a head's or worker's files are named after it
			}
			switch {
			case caPath == "" || caKeyPath == "":
				return errs.New(errs.InvalidArgument, "--ca and --ca-key are required (from megaflow tls ca create)")
			case dir == "":
				return errs.New(errs.InvalidArgument, "--dir is required")
			case name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, "."):
				return errs.New(errs.InvalidArgument, "--name %q: give a file name without slashes, e.g. alice", name)
			}
			ca, err := tlsconfig.ReadPEM(caPath, caKeyPath)
			if err != nil {
				return errs.New(errs.InvalidArgument, "--ca/--ca-key: %v", err)
			}
			var hl []string
			for _, h := range strings.Split(hosts, ",") {
				if h = strings.TrimSpace(h); h != "" {
					hl = append(hl, h)
				}
			}
			p, err := tlsconfig.NewCert(ca, tlsconfig.CertRequest{Role: roles[0], Name: name, NodeID: nodeID, Hosts: hl, Validity: validity, Now: time.Now()})
			if err != nil {
				return errs.New(errs.InvalidArgument, "tls cert create: %v", err)
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
			if err := tlsconfig.WriteFiles(certPath, keyPath, p, force); err != nil {
				return errs.New(errs.FailedPrecondition, "tls cert create: %v", err)
			}
			names := roles[0].ServerName()
			if nodeID != "" {
				names += ", " + roles[0].NodeName(nodeID)
			}
			fmt.Fprintf(g.stdout, "wrote %s (%s certificate, %s) and %s (mode 0600)\n", certPath, roles[0], names, keyPath)
			return nil
		},
	}
	f := create.Flags()
	f.BoolVar(&isHead, "head", false, "a head certificate (serves gRPC and Raft, dials heads and workers)")
	f.BoolVar(&isWorker, "worker", false, "a worker certificate (dials the heads, serves sandboxes to them)")
	f.BoolVar(&isClient, "client", false, "a client certificate (the CLI, the Go and Python clients)")
	f.StringVar(&caPath, "ca", "", "the CA certificate (required)")
	f.StringVar(&caKeyPath, "ca-key", "", "the CA's private key (required)")
	f.StringVar(&dir, "dir", "", "directory to write N.pem and N-key.pem to (required)")
	f.StringVar(&name, "name", "", "file name and common name of the certificate, e.g. alice (default: the --node-id; required for --client)")
	f.StringVar(&nodeID, "node-id", "", "the --node-id of the head or worker that will hold it (required with --head and --worker; not with --client)")
	f.StringVar(&hosts, "host", "", "comma-separated extra DNS names and IP addresses, no wildcards (the daemons check the role and node names, not these)")
	f.DurationVar(&validity, "validity", tlsconfig.DefaultCertValidity, "how long the certificate is valid (1h to 87600h; never past the CA)")
	f.BoolVar(&force, "force", false, "overwrite existing files")
	cert.AddCommand(create)
	return cert
}

func tlsGossipKeyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "gossip-key",
		Short: "Print a new gossip key (32 random bytes, base64) for --gossip-key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, base64.StdEncoding.EncodeToString(key))
			return nil
		},
	}
}
