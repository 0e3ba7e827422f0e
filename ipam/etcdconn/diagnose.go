package etcdconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
)

// http2Hello is an HTTP/2 client preface and an empty SETTINGS frame
// (RFC 9113 3.4, 6.5): a server that accepted the handshake answers it
// with data, one that refused our certificate with an alert, so the
// diagnosis waits for a verdict instead of guessing with a timer.
var http2Hello = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")

// diagnose dials every https endpoint once with the client's TLS config.
// refusal explains a TLS verdict that waiting will not change: the
// server's certificate is not trusted, or the server refused ours. other
// is any other failure (for example nothing listens), worth reporting but
// not final.
func diagnose(ctx context.Context, cfg Config, tlsConfig *tls.Config) (refusal, other error) {
	var refusals, others []error
	for _, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		refused, err := dialTLS(ctx, u, cfg.TLS, tlsConfig)
		switch {
		case refused != nil:
			refusals = append(refusals, refused)
		case err != nil:
			others = append(others, err)
		}
	}
	return errors.Join(refusals...), errors.Join(others...)
}

// dialTLS makes one TLS connection to the endpoint and says how the
// handshake ended.
func dialTLS(ctx context.Context, u *url.URL, files etcdtls.Files, base *tls.Config) (refusal, other error) {
	conf := base.Clone()
	conf.ServerName = u.Hostname()
	conf.NextProtos = []string{"h2"} // what the etcd client negotiates
	d := tls.Dialer{Config: conf}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return explain(u.Host, files, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	// Under TLS 1.3 the server judges our certificate after the client's
	// handshake is done; its verdict comes with the first read.
	if _, err := conn.Write(http2Hello); err != nil {
		return explain(u.Host, files, err)
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return explain(u.Host, files, err)
	}
	return nil, nil
}

// explain turns a TLS dial error into one that names the file at fault.
func explain(host string, files etcdtls.Files, err error) (refusal, other error) {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &unknown) && files.CA.Path == "":
		return fmt.Errorf("server certificate of %s not trusted by the system's roots (no CA file set in %s): %w", host, files.CA.Setting, err), nil
	case errors.As(err, &unknown):
		return fmt.Errorf("server certificate of %s not trusted by CA file %s: %w", host, files.CA, err), nil
	case errors.As(err, &hostname):
		return fmt.Errorf("server certificate of %s is not for that host: %w", host, err), nil
	case errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Errorf("server certificate of %s is not valid: %w", host, err), nil
	case errors.As(err, &op) && op.Op == "remote error" && files.Cert.Path == "":
		return fmt.Errorf("etcd at %s requires a client certificate and none is set (%s, %s): %w", host, files.Cert.Setting, files.Key.Setting, err), nil
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("etcd at %s rejected client certificate file %s: %w", host, files.Cert, err), nil
	}
	return nil, fmt.Errorf("TLS dial to %s: %w", host, err)
}
