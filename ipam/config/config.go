// Package config reads safe-ipam's part of a CNI plugin config and builds
// the config its delegate receives. Keys safe-ipam does not own are kept
// byte for byte.
package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// Handle modes: how the delegate keys handles on ADD.
const (
	// HandlesContainer is Calico 3.x: ADD keys by <network>.<containerID>
	// itself, so pod identity may reach the delegate on ADD.
	HandlesContainer = "container"
	// HandlesPod is Calico 2.x: the delegate keys by namespace.podname when
	// it sees pod identity, so safe-ipam removes it on ADD too.
	HandlesPod = "pod"
)

// Store types.
const (
	StoreFile = "file"
	StoreEtcd = "etcd"
)

// Defaults an operator gets without setting anything.
const (
	DefaultDelegate      = "calico-ipam"
	DefaultStoreDir      = "/var/lib/cni/safe-ipam"
	DefaultCacheDir      = "/var/lib/cni/safe-ipam/cache"
	DefaultEtcdPrefix    = "/safe-ipam/v1"
	DefaultLogFile       = "/var/log/safe-ipam.log"
	DefaultLogLevel      = "info"
	DefaultGCGracePeriod = 60 * time.Second
	DefaultDialTimeout   = 5 * time.Second
	// DefaultVerbTimeout is well under the kubelet's CRI deadline (its
	// runtimeRequestTimeout, 2 minutes by default), so a hung delegate
	// is killed and reported by safe-ipam before the runtime gives up on
	// the call and leaves the delegate running.
	DefaultVerbTimeout = 60 * time.Second
	// VerbGrace is how long a verb may run past ipam.verbTimeout before
	// the call returns without it, and its process exits: its own steps
	// stop at the deadline (the delegate is killed, lock and datastore
	// waits end), so only a step the deadline cannot reach (a read or
	// write in a hung filesystem) is left.
	VerbGrace = 5 * time.Second
)

// CallLifetime is the longest a CNI call through c lives, from its start
// to its process's exit: a record it wrote, last written longer ago, is
// no call's at work.
func (c *Config) CallLifetime() time.Duration { return c.VerbTimeout + VerbGrace }

// ownedKeys are the ipam keys safe-ipam consumes; the delegate never sees them.
var ownedKeys = []string{"type", "delegate", "delegateHandles", "store", "logFile", "logLevel", "cacheDir", "gcGracePeriod", "verbTimeout", outsideKey}

// Store says where records live.
type Store struct {
	Type        string   `json:"type"`
	Dir         string   `json:"dir,omitempty"`
	Endpoints   []string `json:"endpoints,omitempty"`
	Prefix      string   `json:"prefix,omitempty"`
	CertFile    string   `json:"certFile,omitempty"`
	KeyFile     string   `json:"keyFile,omitempty"`
	CAFile      string   `json:"caFile,omitempty"`
	DialTimeout Duration `json:"dialTimeout,omitempty"`
}

// Config is a parsed plugin config.
type Config struct {
	Network         string
	CNIVersion      string
	Calico          CalicoSettings // the top-level keys calico-ipam reads
	Delegate        Delegate
	DelegateHandles string
	Store           Store
	// StoreSet says the store comes from ipam.store, not from Calico's
	// top-level keys; errors name the settings accordingly.
	StoreSet bool
	// followedCertKey and followedCA: an etcd store without endpoints
	// took these TLS files from Calico's etcd_*_file keys
	// (followCalicoEtcd), which errors then name.
	followedCertKey, followedCA bool
	CacheDir                    string
	LogFile                     string
	LogLevel                    string
	GCGracePeriod               time.Duration
	// VerbTimeout bounds a whole CNI call, the delegate and lock waits
	// included.
	VerbTimeout time.Duration
	// FromNode lists the ipam keys the node settings gave (see
	// ParseOnNode).
	FromNode []string

	top  map[string]json.RawMessage
	ipam map[string]json.RawMessage
}

// Parse reads a plugin config. Errors are *types.Error: code 6 when the
// JSON does not decode, 7 when a value is invalid; messages name the field.
func Parse(stdin []byte) (*Config, error) { return parse(stdin, nil, "") }

func parse(stdin []byte, node map[string]json.RawMessage, nodePath string) (*Config, error) {
	c := &Config{}
	if err := json.Unmarshal(stdin, &c.top); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding network config: %v", err), "")
	}
	if c.top == nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decoding network config: not a JSON object", "")
	}
	if err := c.readTop(); err != nil {
		return nil, err
	}
	c.FromNode = c.fillFromNode(node)
	if err := c.readIPAM(); err != nil {
		if len(c.FromNode) > 0 {
			return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%v (ipam keys %v from node settings %s)", err, c.FromNode, nodePath), "")
		}
		return nil, err
	}
	return c, nil
}

func (c *Config) readTop() error {
	if err := field(c.top, "name", &c.Network); err != nil {
		return err
	}
	if c.Network == "" {
		return invalid("name", "missing network name")
	}
	if err := field(c.top, "cniVersion", &c.CNIVersion); err != nil {
		return err
	}
	var err error
	if c.Calico, err = ReadCalico(c.top); err != nil {
		return err
	}
	raw, ok := c.top["ipam"]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return invalid("ipam", "missing ipam section")
	}
	if err := json.Unmarshal(raw, &c.ipam); err != nil || c.ipam == nil {
		return invalid("ipam", "must be a JSON object")
	}
	return nil
}

func (c *Config) readIPAM() error {
	var ipamType string
	if err := field(c.ipam, "type", &ipamType); err != nil {
		return err
	}
	if ipamType == "" {
		return invalid("ipam.type", "missing")
	}
	steps := []func(ipamType string) error{c.readDelegate, c.readHandles, c.readStore, c.readLogging, c.readGC, c.readVerbTimeout}
	for _, step := range steps {
		if err := step(ipamType); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) readHandles(string) error {
	c.DelegateHandles = HandlesContainer
	if err := field(c.ipam, "delegateHandles", &c.DelegateHandles); err != nil {
		return err
	}
	if c.DelegateHandles != HandlesContainer && c.DelegateHandles != HandlesPod {
		return invalid("ipam.delegateHandles", fmt.Sprintf("%q is not %q or %q", c.DelegateHandles, HandlesContainer, HandlesPod))
	}
	return nil
}

func (c *Config) readLogging(string) error {
	c.LogFile, c.LogLevel, c.CacheDir = DefaultLogFile, DefaultLogLevel, DefaultCacheDir
	for key, dst := range map[string]*string{"logFile": &c.LogFile, "logLevel": &c.LogLevel, "cacheDir": &c.CacheDir} {
		if err := field(c.ipam, key, dst); err != nil {
			return err
		}
	}
	if c.LogFile != "" && !filepath.IsAbs(c.LogFile) {
		return invalid("ipam.logFile", "must be an absolute path or empty")
	}
	if c.CacheDir != "" && !filepath.IsAbs(c.CacheDir) {
		return invalid("ipam.cacheDir", "must be an absolute path or empty")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
		return nil
	}
	return invalid("ipam.logLevel", fmt.Sprintf("%q is not debug, info, warn or error", c.LogLevel))
}

func (c *Config) readGC(string) error {
	grace := Duration(DefaultGCGracePeriod)
	if err := field(c.ipam, "gcGracePeriod", &grace); err != nil {
		return err
	}
	if grace < 0 {
		return invalid("ipam.gcGracePeriod", "must not be negative")
	}
	c.GCGracePeriod = time.Duration(grace)
	return nil
}

func (c *Config) readVerbTimeout(string) error {
	timeout := Duration(DefaultVerbTimeout)
	if err := field(c.ipam, "verbTimeout", &timeout); err != nil {
		return err
	}
	if timeout <= 0 {
		return invalid("ipam.verbTimeout", "must be positive")
	}
	c.VerbTimeout = time.Duration(timeout)
	return nil
}

func (c *Config) readStore(string) error {
	if _, c.StoreSet = c.ipam["store"]; !c.StoreSet {
		c.Store = c.calicoStore()
	} else if err := strictField(c.ipam, "store", &c.Store); err != nil {
		return err
	} else if c.Store.Type == StoreEtcd && len(c.Store.Endpoints) == 0 {
		c.followCalicoEtcd()
	}
	return c.Store.validate()
}

// followCalicoEtcd makes an etcd store that names no endpoints Calico's
// etcd, as the config names it now (etcd_endpoints, and the etcd_*_file
// keys for TLS files the store does not name): what install --store=etcd
// writes, so that the records follow when calico-config moves Calico's
// etcd. Without Calico's etcd_endpoints it stays without endpoints, and
// validate refuses it.
func (c *Config) followCalicoEtcd() {
	if c.Calico.Datastore() != DatastoreEtcd || len(c.Calico.Endpoints()) == 0 {
		return
	}
	c.Store.Endpoints = c.Calico.Endpoints()
	if c.Store.CertFile == "" && c.Store.KeyFile == "" {
		c.Store.CertFile, c.Store.KeyFile = c.Calico.EtcdCertFile, c.Calico.EtcdKeyFile
		c.followedCertKey = true
	}
	if c.Store.CAFile == "" {
		c.Store.CAFile = c.Calico.EtcdCACertFile
		c.followedCA = true
	}
}

// calicoStore is the default store: Calico's own etcd when calico-ipam
// uses one (Datastore infers it as Calico does), else node-local files.
func (c *Config) calicoStore() Store {
	if c.Calico.Datastore() != DatastoreEtcd || len(c.Calico.Endpoints()) == 0 {
		return Store{Type: StoreFile}
	}
	return Store{Type: StoreEtcd, Endpoints: c.Calico.Endpoints(),
		CertFile: c.Calico.EtcdCertFile, KeyFile: c.Calico.EtcdKeyFile, CAFile: c.Calico.EtcdCACertFile}
}

func (s *Store) validate() error {
	if s.DialTimeout == 0 {
		s.DialTimeout = Duration(DefaultDialTimeout)
	}
	if s.DialTimeout < 0 {
		return invalid("ipam.store.dialTimeout", "must be positive")
	}
	switch s.Type {
	case StoreFile:
		if s.Dir == "" {
			s.Dir = DefaultStoreDir
		}
		if !filepath.IsAbs(s.Dir) {
			return invalid("ipam.store.dir", "must be an absolute path")
		}
		return nil
	case StoreEtcd:
		return s.validateEtcd()
	}
	return invalid("ipam.store.type", fmt.Sprintf("%q is not %q or %q", s.Type, StoreFile, StoreEtcd))
}

func (s *Store) validateEtcd() error {
	if len(s.Endpoints) == 0 {
		return invalid("ipam.store.endpoints", "the etcd store needs at least one endpoint: give ipam.store.endpoints, or Calico's etcd_endpoints, which an etcd store without endpoints follows")
	}
	for _, e := range s.Endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return invalid("ipam.store.endpoints", fmt.Sprintf("%q is not an http(s) URL", e))
		}
	}
	if s.Prefix == "" {
		s.Prefix = DefaultEtcdPrefix
	}
	s.Prefix = strings.TrimRight(s.Prefix, "/")
	if !strings.HasPrefix(s.Prefix, "/") {
		return invalid("ipam.store.prefix", "must start with /")
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return invalid(storeTLSKeys.cert, "certFile and keyFile go together")
	}
	return nil
}

// Node is the node's name as Calico resolves it (see Calico.Node).
// Records and the etcd store's keys carry it, so it must match Calico's.
func (c *Config) Node() (string, error) { return c.Calico.Node() }

// Datastore is Calico's datastore as calico-ipam infers it.
func (c *Config) Datastore() string { return c.Calico.Datastore() }
