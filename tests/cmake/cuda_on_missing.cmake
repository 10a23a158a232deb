# The EMBER_CUDA / EMBER_SIMT options, run by ctest as `cmake:cuda_option`:
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -P cuda_on_missing.cmake
#  - EMBER_CUDA=ON without the toolkit is a configure error that names what is missing;
#  - EMBER_CUDA=AUTO without nvcc (or without a GPU) builds no real CUDA flavour: CPU, plus SIMT
#    when boost.context is there;
#  - EMBER_SIMT=ON without boost.context is an error naming it;
#  - EMBER_SIMT=ON together with the real CUDA flavour is an error.
file(REMOVE_RECURSE ${WORK_DIR})
set(common -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCH=OFF)
set(no_nvcc -DCMAKE_CUDA_COMPILER=/nonexistent/nvcc)

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/on -DEMBER_CUDA=ON ${no_nvcc} ${common}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "EMBER_CUDA=ON without nvcc configured successfully")
endif()
if(NOT err MATCHES "EMBER_CUDA=ON but these were not found: nvcc")
  message(FATAL_ERROR "EMBER_CUDA=ON without nvcc: the error does not name nvcc:\n${err}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/auto -DEMBER_CUDA=AUTO ${no_nvcc} ${common}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "flavours: CPU( \\+ SIMT[^;]*)?;" OR out MATCHES "\\+ CUDA")
  message(FATAL_ERROR "EMBER_CUDA=AUTO without nvcc should configure CPU (+ SIMT):\n${out}\n${err}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/simt-on -DEMBER_CUDA=OFF -DEMBER_SIMT=ON
                        -DEMBER_BOOST_CONTEXT_LIBRARY=/nonexistent/libboost_context.so ${common}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "EMBER_SIMT=ON but these were not found: boost.context")
  message(FATAL_ERROR "EMBER_SIMT=ON without boost.context: expected an error naming it:\n${err}")
endif()

# Both flavours at once: only checkable where the CUDA flavour itself configures (nvcc, cuDNN).
find_program(nvcc NAMES nvcc PATHS /usr/local/cuda/bin)
if(nvcc)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/both -DEMBER_CUDA=ON -DEMBER_SIMT=ON
                          -DCMAKE_CUDA_COMPILER=${nvcc} ${common}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "(EMBER_SIMT=ON and the real CUDA flavour|EMBER_CUDA=ON but these were not found)")
    message(FATAL_ERROR "EMBER_CUDA=ON with EMBER_SIMT=ON should be a configure error:\n${err}")
  endif()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "cmake:cuda_option: PASS")
