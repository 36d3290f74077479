# Thin wrapper over scripts/ (the scripts are the source of truth).
.PHONY: setup build demo test clean
setup:
	bash scripts/setup.sh
build:
	bash scripts/build.sh
demo:
	bash scripts/demo.sh
test:
	bash scripts/test.sh
clean:
	rm -rf build
