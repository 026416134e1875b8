// What the daemon forgets when a call changes the store behind the stage
// path (methods.h): one place, so every such call drops the same state.
#include "methods.h"

namespace fdo::daemon::methods {

void forget_profile(ServiceState& s, const std::string& pk) {
  s.feedback->forget(pk);
  s.guard->forget(pk);
  s.lifecycles->forget(pk);
}

Status forget_program(ServiceState& s, const std::string& ik) {
  FDO_TRY_STATUS(s.programs->forget(ik));
  s.orch->evict(ik); // storage keys start with the IK: VK and CK entries alike
  return ok();
}

void forget_everything(ServiceState& s) {
  s.feedback->forget_all();
  s.guard->forget_all();
  s.lifecycles->forget_all();
  s.programs->forget_loaded();
}

} // namespace fdo::daemon::methods
