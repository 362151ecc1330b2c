# Included by ctest after the discovered GoogleTest tests (TEST_INCLUDE_FILES, see
# CMakeLists.txt): labels and limits come from the test's name, so a new test gets them by
# being named right. The name's prefix tokens say what it needs:
#   DOCKER_ (a Docker Engine and the base image), ROOT_ (root: nftables, netns), GPU_ (or
#   NVIDIA_GPU_: a real NVIDIA GPU and driver),
#   POSTGRES_, BROWSER_, CHROMIUM_ (Chromium + node + web/node_modules) -> the lower-case label
#   of the same name;
#   SLOW_  -> label `slow` and a 300 s limit instead of 120 s;
#   SERIAL_ -> runs alone (RUN_SERIAL): it restarts dockerd or changes global state.
# Every test of unit_tests is labelled `unit` (60 s), every one of integration_tests
# `integration` (120 s).
foreach(binary unit integration)
  foreach(test IN LISTS ${binary}_tests_TESTS)
    # "Suite.Name" or "Prefix/Suite.Name/Param": the part after the first '.', up to a '/'.
    string(REGEX REPLACE "^[^.]*\\." "" name "${test}")
    string(REGEX REPLACE "/.*$" "" name "${name}")
    set(labels ${binary})
    set(timeout 60)
    if(binary STREQUAL "integration")
      set(timeout 120)
    endif()
    set(serial FALSE)
    # A fresh clone has no timing data: ctest starts the highest COST first, so the long tests
    # start early instead of ending the run alone (slow ones, then engine ones; the *.OnPostgres
    # suites get 50 in CMakeLists.txt).
    set(cost 1)
    while(name MATCHES "^(DOCKER|ROOT|GPU|NVIDIA_GPU|POSTGRES|BROWSER|CHROMIUM|SLOW|SERIAL)_(.*)$")
      set(token "${CMAKE_MATCH_1}")
      if(token STREQUAL "NVIDIA_GPU")
        set(token GPU)
      endif()
      set(name "${CMAKE_MATCH_2}")
      if(token STREQUAL "SERIAL")
        set(serial TRUE)
      else()
        string(TOLOWER "${token}" label)
        list(APPEND labels ${label})
        if(token STREQUAL "SLOW")
          set(timeout 300)
          set(cost 100)
        elseif(token STREQUAL "DOCKER" AND cost LESS 10)
          set(cost 10)
        endif()
      endif()
    endwhile()
    set_tests_properties("${test}" PROPERTIES LABELS "${labels}" TIMEOUT ${timeout} RUN_SERIAL ${serial} COST ${cost})
  endforeach()
endforeach()
