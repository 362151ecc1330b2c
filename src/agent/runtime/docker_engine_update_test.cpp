#include "agent/runtime/docker_engine_driver.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace gpucloud::agent {
namespace {
namespace json = boost::json;

TEST(FlattenImport, ChangesCarryTheParentImagesConfig) {
  json::object config = json::parse(R"({
    "Env": ["PATH=/usr/local/bin:/usr/bin", "GREETING=hello \"world\" $HOME", "EMPTY="],
    "Cmd": ["/bin/bash", "-l"],
    "Entrypoint": [],
    "WorkingDir": "/root",
    "User": "",
    "Labels": {"gpucloud.instance": "i-abc", "note": "two words"},
    "Hostname": ""
  })").as_object();
  auto changes = DockerEngineDriver::import_changes(config);
  EXPECT_EQ(changes, (std::vector<std::string>{
                         R"(ENV PATH="/usr/local/bin:/usr/bin")",
                         R"(ENV GREETING="hello \"world\" \$HOME")",
                         R"(ENV EMPTY="")",
                         R"(CMD ["/bin/bash","-l"])",
                         R"(ENTRYPOINT [])",
                         R"(WORKDIR /root)",
                         R"(LABEL "gpucloud.instance"="i-abc")",
                         R"(LABEL "note"="two words")",
                     }));
}

TEST(FlattenImport, AnEmptyConfigNeedsNoChanges) {
  EXPECT_TRUE(DockerEngineDriver::import_changes(json::object{}).empty());
}

}  // namespace
}  // namespace gpucloud::agent
