package epp

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// setHeader is a header mutation entry: raw_value only (Envoy reads only
// raw_value since 1.27, and both set fails the request: llm-d's
// pkg/common/envoy/headers.go, Dynamo's envoy_helpers.rs), replacing any
// copy the client sent.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// destination is the header mutation naming list, the destination
// endpoints (the header and the metadata carry the same value, as the
// protocol requires).
func destination(list string) *extprocv3.HeaderMutation {
	return &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(DestinationHeader, list)}}
}

// metadata is the dynamic metadata naming list:
// {namespace: {x-gateway-destination-endpoint: list}}.
func (s *Server) metadata(list string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		s.cfg.MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(list),
		}}),
	}}
}

// immediate is an ImmediateResponse of code with a JSON body; details
// names the outcome in Envoy's access log (%RESPONSE_CODE_DETAILS%).
func immediate(code int, body []byte, details string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
		Body:    body,
		Details: "kvselect_epp_" + details,
	}}}
}
