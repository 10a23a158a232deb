# EMBER_CUDA=ON without the toolkit must be a configure error that names what is missing, and
# AUTO must quietly build the CPU flavour. Run by ctest as `cmake:cuda_option`:
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -P cuda_on_missing.cmake
file(REMOVE_RECURSE ${WORK_DIR})
set(common -DCMAKE_CUDA_COMPILER=/nonexistent/nvcc -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF
           -DEMBER_BUILD_BENCH=OFF)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/on -DEMBER_CUDA=ON ${common}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "EMBER_CUDA=ON without nvcc configured successfully")
endif()
if(NOT err MATCHES "EMBER_CUDA=ON but these were not found: nvcc")
  message(FATAL_ERROR "EMBER_CUDA=ON without nvcc: the error does not name nvcc:\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/auto -DEMBER_CUDA=AUTO ${common}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "flavours: CPU;")
  message(FATAL_ERROR "EMBER_CUDA=AUTO without nvcc should configure the CPU flavour:\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "cmake:cuda_option: PASS")
