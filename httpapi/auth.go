package httpapi

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// Bearer-token authentication (Config.AuthToken), a kvselect addition: the
// reference has none. The token is held only as its SHA-256, and a
// presented token is hashed and compared with subtle.ConstantTimeCompare,
// so the comparison takes the same time whatever the token's length or
// content.

var errUnauthorized = []byte(`{"error":"missing or invalid bearer token"}`)

// authExempt reports whether path is served without a token: the liveness,
// readiness and metrics routes, which probes and scrapers call unauthenticated.
func authExempt(path []byte) bool {
	switch string(path) {
	case "/health", "/ready", "/metrics":
		return true
	}
	return false
}

// authorized reports whether the request carries Authorization: Bearer
// <token> (the scheme in any case) with the configured token.
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	if len(h) < 7 || !bytes.EqualFold(h[:7], []byte("Bearer ")) {
		return false
	}
	sum := sha256.Sum256(bytes.Trim(h[7:], " "))
	return subtle.ConstantTimeCompare(sum[:], s.authSum[:]) == 1
}

// unauthorized answers 401 with WWW-Authenticate: Bearer.
func (s *Server) unauthorized(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, "Bearer")
	s.writeRaw(ctx, fasthttp.StatusUnauthorized, errUnauthorized)
}
