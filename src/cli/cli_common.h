// Shared pieces of the `tensord` subcommands: exit codes, the client every command goes
// through, tensor files, and value formatting.
#pragma once

#include <memory>
#include <string>

#include "tensord/client.h"
#include "tensord/tensor.h"

namespace tensord::cli {

// Exit status (scripts may rely on it): 0 success; 1 the operation failed (a device or
// runtime error, message on stderr); 2 bad usage or bad input (unknown flag, unreadable file,
// a model that does not load, inputs that do not fit the model).
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Prints "tensord: <message>" on stderr.
void print_error(const std::string& message);

// A client (embedded engine, or the broker at TENSORD_ADDRESS) and the device work goes to.
struct ClientAndDevice {
  std::unique_ptr<Client> client;
  std::string device;  // the device asked for, else the client's default device
};

// Connects and checks that `device` ("" = default) is one of the client's devices. The error
// says which devices exist. Errors are INVALID_ARGUMENT for an unknown device (bad usage).
Result<ClientAndDevice> open_client(const std::string& device);

// Reads a tensor from a NumPy .npy file or a serialized onnx.TensorProto (.pb); the format is
// told by the file's magic bytes, not its name. Errors name the file.
Result<HostTensor> read_tensor_any(const std::string& path);

// Element `i` of `t` as text: "3.25", "-7", "true", "nan", "inf".
std::string format_element(const HostTensor& t, int64_t i);

// The name a model goes by in output, logs and the broker's status: its file's stem
// ("resnet18.onnx" -> "resnet18"), or its folder's name for a file named model.onnx
// (".../resnet18/model.onnx" -> "resnet18", the ONNX zoo's and --models' layout).
std::string model_name_for(const std::string& path);

// Makes an ONNX value name usable as a file name (anything but [A-Za-z0-9._-] becomes '_').
std::string file_name_for(const std::string& value_name);

}  // namespace tensord::cli
