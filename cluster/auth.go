package cluster

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/narwhal-router/narwhal/config"
)

// The cluster's authentication (cluster.tls). Without credentials — allowed on loopback only,
// config refuses anything else — the cluster runs as before, unauthenticated. With them:
//
//   - protoactor's gRPC remote, which carries gossip and so every verdict, runs mutual TLS 1.3:
//     both ends present a certificate the cluster CA signed, or the handshake fails. Host names
//     are not checked (nodes reach each other by address, and a certificate need not list
//     them): membership is possession of a CA-signed certificate and its key.
//   - each static-provider heartbeat (UDP) is signed with the node's key and carries its
//     certificate; a receiver accepts it only if the CA signed the certificate, the signature
//     holds, its time stamp is within heartbeatSkew of its own clock and later than the last
//     one it took from that address (a replayed heartbeat is stale or old news).

// heartbeatSkew bounds how far a heartbeat's time stamp may be from the receiver's clock.
const heartbeatSkew = 30 * time.Second

// credentials are the gRPC server's and dialer's transport credentials. The dialer's are
// always plain: with cluster.tls, dialPeer has made the TLS handshake itself (clientTLS).
func (n *Node) credentials() (server, dial credentials.TransportCredentials) {
	c := n.creds
	if c == nil {
		return insecure.NewCredentials(), insecure.NewCredentials()
	}
	server = credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c.Certificate},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: c.CAs,
		NextProtos: []string{"h2"},
	})
	return server, insecure.NewCredentials()
}

// clientTLS is the dialer's side of the mutual TLS, nil without cluster.tls.
func (n *Node) clientTLS() *tls.Config {
	c := n.creds
	if c == nil {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c.Certificate},
		NextProtos: []string{"h2"},
		// The server's chain is checked against the cluster CA in VerifyConnection, without a
		// host name: peers are dialled by address.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return verifyPeer(c, cs.PeerCertificates) },
	}
}

// dialPeer is protoactor's dialer for this node's peers.
func (n *Node) dialPeer(ctx context.Context, addr string) (net.Conn, error) {
	return dialPeer(ctx, addr, n.tls)
}

var errNoPeerCertificate = errors.New("the peer presented no certificate")

// verifyPeer checks a peer's chain against the cluster CA.
func verifyPeer(c *config.ClusterCredentials, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errNoPeerCertificate
	}
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: c.CAs, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// heartbeatMagic starts a signed heartbeat datagram: magic, the signer's certificate (DER,
// length-prefixed), a time stamp (Unix nanoseconds), the signature (length-prefixed), then the
// heartbeat message itself. The signature covers magic, cluster name, time stamp and message.
var heartbeatMagic = []byte("NWHB1")

// signer signs this node's heartbeats; its time stamps only move forward (the wall clock at
// start plus monotonic time since), so a peer never takes one for a replay.
type signer struct {
	creds *config.ClusterCredentials
	name  string
	start time.Time
}

func (s *signer) seal(msg []byte) ([]byte, error) {
	stamp := s.start.UnixNano() + int64(time.Since(s.start))
	signed := signedPart(s.name, stamp, msg)
	sig, err := sign(s.creds.Certificate.PrivateKey, signed)
	if err != nil {
		return nil, err
	}
	cert := s.creds.Certificate.Certificate[0]
	out := make([]byte, 0, len(heartbeatMagic)+2+len(cert)+8+2+len(sig)+len(msg))
	out = append(out, heartbeatMagic...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(cert)))
	out = append(out, cert...)
	out = binary.BigEndian.AppendUint64(out, uint64(stamp))
	out = binary.BigEndian.AppendUint16(out, uint16(len(sig)))
	out = append(out, sig...)
	return append(out, msg...), nil
}

func signedPart(cluster string, stamp int64, msg []byte) []byte {
	b := make([]byte, 0, len(heartbeatMagic)+len(cluster)+1+8+len(msg))
	b = append(append(append(b, heartbeatMagic...), cluster...), 0)
	b = binary.BigEndian.AppendUint64(b, uint64(stamp))
	return append(b, msg...)
}

// verifier opens signed heartbeats; it remembers the certificates it verified (bounded), so a
// peer's chain is checked once, not five times a second.
type verifier struct {
	creds *config.ClusterCredentials
	name  string

	mu       sync.Mutex
	verified map[[sha256.Size]byte]*x509.Certificate
}

var errBadHeartbeat = errors.New("unauthenticated heartbeat")

// open returns the heartbeat message and its time stamp, or errBadHeartbeat.
func (v *verifier) open(b []byte, now time.Time) (msg []byte, stamp int64, err error) {
	if !bytes.HasPrefix(b, heartbeatMagic) {
		return nil, 0, errBadHeartbeat
	}
	b = b[len(heartbeatMagic):]
	certDER, b, ok := lengthPrefixed(b)
	if !ok || len(b) < 8 {
		return nil, 0, errBadHeartbeat
	}
	stamp, b = int64(binary.BigEndian.Uint64(b)), b[8:]
	sig, msg, ok := lengthPrefixed(b)
	if !ok {
		return nil, 0, errBadHeartbeat
	}
	if d := now.Sub(time.Unix(0, stamp)); d > heartbeatSkew || d < -heartbeatSkew {
		return nil, 0, errBadHeartbeat
	}
	cert, err := v.certificate(certDER)
	if err != nil {
		return nil, 0, errBadHeartbeat
	}
	if verify(cert.PublicKey, signedPart(v.name, stamp, msg), sig) != nil {
		return nil, 0, errBadHeartbeat
	}
	return msg, stamp, nil
}

func (v *verifier) certificate(der []byte) (*x509.Certificate, error) {
	key := sha256.Sum256(der)
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.verified[key]; ok {
		return c, nil
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := verifyPeer(v.creds, []*x509.Certificate{c}); err != nil {
		return nil, err
	}
	if v.verified == nil || len(v.verified) >= 1024 {
		v.verified = map[[sha256.Size]byte]*x509.Certificate{}
	}
	v.verified[key] = c
	return c, nil
}

func lengthPrefixed(b []byte) (field, rest []byte, ok bool) {
	if len(b) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return nil, nil, false
	}
	return b[2 : 2+n], b[2+n:], true
}

// sign signs msg with key: ECDSA and RSA (PKCS #1 v1.5) over its SHA-256, Ed25519 over msg.
func sign(key crypto.PrivateKey, msg []byte) ([]byte, error) {
	switch k := key.(type) {
	case ed25519.PrivateKey:
		return ed25519.Sign(k, msg), nil
	case *ecdsa.PrivateKey:
		d := sha256.Sum256(msg)
		return ecdsa.SignASN1(rand.Reader, k, d[:])
	case *rsa.PrivateKey:
		d := sha256.Sum256(msg)
		return rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:])
	}
	return nil, errors.New("cluster.tls.key_file: an unsupported key type (want ECDSA, RSA or Ed25519)")
}

func verify(pub crypto.PublicKey, msg, sig []byte) error {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if ed25519.Verify(k, msg, sig) {
			return nil
		}
	case *ecdsa.PublicKey:
		d := sha256.Sum256(msg)
		if ecdsa.VerifyASN1(k, d[:], sig) {
			return nil
		}
	case *rsa.PublicKey:
		d := sha256.Sum256(msg)
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, d[:], sig)
	}
	return errBadHeartbeat
}
