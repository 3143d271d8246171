package link

import "encoding/json"

// Message types on the wire. Field names follow the coordinator's
// protocol package; everything is JSON text frames tagged by "type".
const (
	// Provider to coordinator.
	typeRegister        = "register"
	typeHeartbeat       = "heartbeat"
	typeAccepted        = "inference_accepted"
	typeChunk           = "inference_response_chunk"
	typeComplete        = "inference_complete"
	typeError           = "inference_error"
	typeAttestation     = "attestation_response"
	typeLoadModelStatus = "load_model_status"

	// Coordinator to provider.
	typeInferenceRequest = "inference_request"
	typeCancel           = "cancel"
	typeChallenge        = "attestation_challenge"
	typeRuntimeStatus    = "runtime_status"
	typeLoadModel        = "load_model"
)

// Statuses of a load_model_status reply.
const (
	loadStarted   = "started"
	loadSucceeded = "succeeded"
	loadFailed    = "failed"
)

// Backend is the backend name the provider registers with.
const Backend = "provider"

// ModelInfo describes one model the provider offers, as registered.
type ModelInfo struct {
	// ID is the model name requests carry.
	ID        string `json:"id"`
	SizeBytes int64  `json:"size_bytes"`
	// ModelType is the architecture (the config's model_type).
	ModelType    string `json:"model_type"`
	Quantization string `json:"quantization"`
	// WeightHash is the SHA-256 fingerprint of the weight files, hex;
	// empty when unknown.
	WeightHash string `json:"weight_hash,omitempty"`
}

type cpuCores struct {
	Total       int `json:"total"`
	Performance int `json:"performance"`
	Efficiency  int `json:"efficiency"`
}

type hardware struct {
	MachineModel       string   `json:"machine_model"`
	ChipName           string   `json:"chip_name"`
	ChipFamily         string   `json:"chip_family"`
	ChipTier           string   `json:"chip_tier"`
	MemoryGB           int      `json:"memory_gb"`
	MemoryAvailableGB  float64  `json:"memory_available_gb"`
	CPUCores           cpuCores `json:"cpu_cores"`
	GPUCores           int      `json:"gpu_cores"`
	MemoryBandwidthGBs float64  `json:"memory_bandwidth_gbs"`
}

type privacyCapabilities struct {
	TextBackendInprocess    bool `json:"text_backend_inprocess"`
	TextProxyDisabled       bool `json:"text_proxy_disabled"`
	PythonRuntimeLocked     bool `json:"python_runtime_locked"`
	DangerousModulesBlocked bool `json:"dangerous_modules_blocked"`
	SIPEnabled              bool `json:"sip_enabled"`
	AntiDebugEnabled        bool `json:"anti_debug_enabled"`
	CoreDumpsDisabled       bool `json:"core_dumps_disabled"`
	EnvScrubbed             bool `json:"env_scrubbed"`
	HypervisorActive        bool `json:"hypervisor_active"`
}

type registerMsg struct {
	Type                    string               `json:"type"`
	Hardware                hardware             `json:"hardware"`
	Models                  []ModelInfo          `json:"models"`
	Backend                 string               `json:"backend"`
	Version                 string               `json:"version,omitempty"`
	PublicKey               string               `json:"public_key"`
	EncryptedResponseChunks bool                 `json:"encrypted_response_chunks"`
	Attestation             json.RawMessage      `json:"attestation,omitempty"`
	PrivacyCapabilities     *privacyCapabilities `json:"privacy_capabilities"`
}

type heartbeatStats struct {
	RequestsServed  int64 `json:"requests_served"`
	TokensGenerated int64 `json:"tokens_generated"`
}

type systemMetrics struct {
	MemoryPressure float64 `json:"memory_pressure"`
	CPUUsage       float64 `json:"cpu_usage"`
	ThermalState   string  `json:"thermal_state"`
}

type slotCapacity struct {
	Model              string `json:"model"`
	State              string `json:"state"`
	NumRunning         int    `json:"num_running"`
	NumWaiting         int    `json:"num_waiting"`
	ActiveTokens       int64  `json:"active_tokens"`
	MaxTokensPotential int64  `json:"max_tokens_potential"`
}

type backendCapacity struct {
	Slots             []slotCapacity `json:"slots"`
	GPUMemoryActiveGB float64        `json:"gpu_memory_active_gb"`
	GPUMemoryPeakGB   float64        `json:"gpu_memory_peak_gb"`
	GPUMemoryCacheGB  float64        `json:"gpu_memory_cache_gb"`
	TotalMemoryGB     float64        `json:"total_memory_gb"`
}

type heartbeatMsg struct {
	Type            string           `json:"type"`
	Status          string           `json:"status"`
	ActiveModel     *string          `json:"active_model"`
	Stats           heartbeatStats   `json:"stats"`
	WarmModels      []string         `json:"warm_models,omitempty"`
	SystemMetrics   systemMetrics    `json:"system_metrics"`
	BackendCapacity *backendCapacity `json:"backend_capacity"`
}

// sealed is a NaCl box: the sender's X25519 public key and
// base64(nonce || box), both standard base64.
type sealed struct {
	EphemeralPublicKey string `json:"ephemeral_public_key"`
	Ciphertext         string `json:"ciphertext"`
}

// requestMsg is an inference_request; its plain "body" alternative is
// refused, so it is not read.
type requestMsg struct {
	RequestID     string  `json:"request_id"`
	EncryptedBody *sealed `json:"encrypted_body"`
}

type acceptedMsg struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
}

type chunkMsg struct {
	Type          string  `json:"type"`
	RequestID     string  `json:"request_id"`
	EncryptedData *sealed `json:"encrypted_data"`
}

// tokenUsage is a request's token usage as inference_complete reports
// it.
type tokenUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type completeMsg struct {
	Type         string     `json:"type"`
	RequestID    string     `json:"request_id"`
	Usage        tokenUsage `json:"usage"`
	ResponseHash string     `json:"response_hash"`
}

type errorMsg struct {
	Type       string `json:"type"`
	RequestID  string `json:"request_id"`
	Error      string `json:"error"`
	StatusCode int    `json:"status_code"`
}

type idMsg struct {
	RequestID string `json:"request_id"`
}

type challengeMsg struct {
	Nonce     string `json:"nonce"`
	Timestamp string `json:"timestamp"`
}

type attestationMsg struct {
	Type             string            `json:"type"`
	Nonce            string            `json:"nonce"`
	Signature        string            `json:"signature"`
	PublicKey        string            `json:"public_key"`
	HypervisorActive *bool             `json:"hypervisor_active,omitempty"`
	RDMADisabled     *bool             `json:"rdma_disabled,omitempty"`
	SIPEnabled       *bool             `json:"sip_enabled,omitempty"`
	BinaryHash       string            `json:"binary_hash,omitempty"`
	ModelHashes      map[string]string `json:"model_hashes,omitempty"`
}

type runtimeStatusMsg struct {
	Verified   bool `json:"verified"`
	Mismatches []struct {
		Component string `json:"component"`
	} `json:"mismatches"`
}

type loadModelMsg struct {
	ModelID string `json:"model_id"`
}

type loadStatusMsg struct {
	Type    string `json:"type"`
	ModelID string `json:"model_id"`
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"`
}
