package httpapi

import _ "embed"

// openAPI is the OpenAPI 3.1 description of the selector's routes, served
// at GET /openapi.json. It is kept by hand; TestOpenAPIDescribesResponses
// validates real responses of every route against it (and its request
// schemas against the requests that produced them), so it cannot drift
// from the server.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the selector's routes. The
// caller must not modify it.
func OpenAPI() []byte { return openAPI }

// indexerOpenAPI is the OpenAPI 3.1 description of the standalone
// indexer's routes (NewIndexer), served at its GET /openapi.json. Kept by
// hand like openAPI; TestIndexerOpenAPIDescribesResponses holds it to the
// server.
//
//go:embed indexer_openapi.json
var indexerOpenAPI []byte

// IndexerOpenAPI returns the OpenAPI 3.1 document of the standalone
// indexer's routes. The caller must not modify it.
func IndexerOpenAPI() []byte { return indexerOpenAPI }
