# find_package(convoy COMPONENTS zmq): convoy::zmq_ps, the parameter server over ZeroMQ. Installed
# only by a convoy built with it, whose convoy-targets.cmake defines the target and whose
# convoy-config.cmake has already found cppzmq with the other dependencies.
set(convoy_zmq_FOUND TRUE)
