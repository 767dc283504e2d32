// `tensord models list|load|unload`: a broker's named models, and model control (loading,
// reloading and unloading DIR/NAME while it serves; the broker needs `--models DIR
// --model-control`, the caller an operator's token). Opens no session.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/broker_address.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "rpc/remote_client.h"

namespace tensord::cli {
namespace {

struct ModelsOptions {
  std::string action;   // list, load, unload
  std::string name;     // load/unload: the model (a folder of the broker's DIR)
  std::string address;  // "" = TENSORD_ADDRESS
  bool json = false;
  std::string tls_ca;
};

std::string tensors(const std::vector<ValueInfo>& list) {
  std::string out;
  for (const ValueInfo& v : list)
    out += (out.empty() ? "" : ", ") + v.name + ":" + v.type.to_string();
  return out;
}

int run_models(ModelsOptions o) {
  o.address = broker_address(o.address, "models");
  if (o.address.empty()) return kExitUsage;
  if (!o.tls_ca.empty()) setenv("TENSORD_TLS_CA", o.tls_ca.c_str(), 1);
  rpc::ModelControl op = rpc::ModelControl::kList;
  if (o.action == "load") op = rpc::ModelControl::kLoad;
  if (o.action == "unload") op = rpc::ModelControl::kUnload;
  if (op != rpc::ModelControl::kList && o.name.empty()) {
    std::cerr << "tensord: models " << o.action << " needs the model's NAME\n";
    return kExitUsage;
  }
  auto models = rpc::control_model(o.address, op, o.name);
  if (!models.ok()) {
    std::cerr << "tensord: models " << o.action << ": " << models.status().to_string() << "\n";
    return models.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const ModelInfo& m : *models) {
      nlohmann::json e = {{"name", m.name},     {"ready", m.ready},
                          {"device", m.device}, {"weight_bytes", m.weight_bytes},
                          {"opset", m.opset},   {"inputs", tensors(m.inputs)},
                          {"outputs", tensors(m.outputs)}};
      if (!m.ready) e["reason"] = m.reason;
      j.push_back(std::move(e));
    }
    std::cout << nlohmann::json{{"action", o.action}, {"name", o.name}, {"models", j}}.dump(2)
              << "\n";
    return kExitOk;
  }
  if (op == rpc::ModelControl::kUnload) {
    std::cout << "unloaded '" << o.name << "'\n";
    return kExitOk;
  }
  if (models->empty()) {
    std::cout << "no named models (a broker loads them with `tensord serve --models DIR`)\n";
    return kExitOk;
  }
  for (const ModelInfo& m : *models) {
    if (!m.ready) {
      std::cout << m.name << "  unavailable: " << m.reason << "\n";
      continue;
    }
    std::cout << m.name << "  ready on " << m.device << "  inputs " << tensors(m.inputs)
              << "  outputs " << tensors(m.outputs) << "\n";
  }
  return kExitOk;
}

}  // namespace

StatusCommand add_models_command(CLI::App& app) {
  auto options = std::make_shared<ModelsOptions>();
  auto* cmd = app.add_subcommand(
      "models",
      "A broker's named models: list them, or load, reload and unload one while it serves "
      "(the broker needs --models DIR --model-control, the caller an operator's token)");
  cmd->add_option("action", options->action, "list, load (or reload) or unload")
      ->required()
      ->check(CLI::IsMember({"list", "load", "unload"}));
  cmd->add_option("name", options->name, "load/unload: the model, a folder of the broker's DIR");
  cmd->add_option("--address", options->address,
                  "The broker (HOST:PORT or unix:PATH; default TENSORD_ADDRESS)");
  cmd->add_flag("--json", options->json, "Print the models as JSON");
  cmd->add_option("--tls-ca", options->tls_ca, "Speak TLS to the broker, verified with this PEM CA");
  return {[cmd] { return cmd->parsed(); }, [options] { return run_models(*options); }};
}

}  // namespace tensord::cli
