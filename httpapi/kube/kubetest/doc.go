// Package kubetest is a protocol-level fake of kube-apiserver (API) for the
// tests of httpapi/kube and of the processes that discover their workers
// through it: the real client-go, pointed at it by a generated
// kubeconfig, lists and watches pods and InferencePools over TLS as it
// would a cluster's. No kube-apiserver can run on this machine (Debian
// packages none, and nothing is downloaded), so this fake stands in for
// it; only test files import this package.
package kubetest
